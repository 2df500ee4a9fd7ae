package chaos

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	return strings.TrimSuffix(got, "\n"), err
}

func TestProxyForwardsStallsAndCuts(t *testing.T) {
	t.Parallel()
	p, err := NewProxy(echoServer(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	r := bufio.NewReader(c)
	got, err := roundTrip(t, c, r, "hello")
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	assert.Equal(t, 1, p.Open())

	// A stall holds the bytes, the connection stays open.
	go p.Stall(400 * time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	got, err = roundTrip(t, c, r, "stalled")
	require.NoError(t, err)
	assert.Equal(t, "stalled", got)
	assert.GreaterOrEqual(t, time.Since(t0), 250*time.Millisecond, "the stall held the bytes")

	// A cut resets the connection and refuses new ones for a while.
	assert.Equal(t, 1, p.Cut(300*time.Millisecond))
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = roundTrip(t, c, r, "after cut")
	assert.Error(t, err, "the cut connection is gone")

	// During the down time a new connection is reset, at the dial or at
	// its first exchange.
	if refused, err := net.Dial("tcp", p.Addr()); err == nil {
		_ = refused.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = roundTrip(t, refused, bufio.NewReader(refused), "refused")
		assert.Error(t, err, "a connection during the down time is reset")
		_ = refused.Close()
	}

	time.Sleep(350 * time.Millisecond)
	again, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer func() { _ = again.Close() }()
	got, err = roundTrip(t, again, bufio.NewReader(again), "back")
	require.NoError(t, err)
	assert.Equal(t, "back", got)
}

func TestProxyRefusesNonLoopbackTargets(t *testing.T) {
	t.Parallel()
	_, err := NewProxy("192.0.2.1:5672")
	assert.ErrorContains(t, err, "only loopback")
}

func TestRenderFailsOnLostDuplicatedOrOutOfOrder(t *testing.T) {
	t.Parallel()
	ok := Row{Flow: "disputes outbox", Sent: 10, Effects: 10, OutOfOrder: -1, Faults: map[string]int{FaultSIGTERM: 1, FaultKillConsumer: 2},
		MaxRecovery: 1500 * time.Millisecond, MaxRecoveryKind: FaultKillConsumer}
	assert.False(t, ok.Failed())
	for _, bad := range []Row{{Lost: 1}, {Duplicated: 1}, {OutOfOrder: 1}, {Unsent: 1}} {
		assert.True(t, bad.Failed())
	}
	var b strings.Builder
	require.NoError(t, Render(&b, "rabbitmq", []Row{ok, {Flow: "booking FIFO", Sent: 5, Effects: 4, Lost: 1, Faults: map[string]int{}}}))
	out := b.String()
	assert.Contains(t, out, "3: kill-consumer 2, sigterm 1")
	assert.Contains(t, out, "1.5s (kill-consumer)")
	assert.Contains(t, out, "FAIL")
	assert.Contains(t, out, "n/a")
}
