package realtime_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/realtime"
)

// sseEvent is one event as a client read it off the stream.
type sseEvent struct {
	ID, Type, Data string
}

// sseClient reads one stream in the background.
type sseClient struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	events   []sseEvent
	comments []string
	changed  chan struct{}
}

func token(t testing.TB, c realtime.Claims) string {
	t.Helper()
	if c.Expires == 0 {
		c.Expires = time.Now().Add(time.Hour).Unix()
	}
	tok, err := realtime.MintToken(testSecret, c)
	require.NoError(t, err)
	return tok
}

// open connects to base+path with tok and lastEventID; it fails the test
// unless the answer is 200.
func open(t *testing.T, base, path, tok, lastEventID string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp := requestCtx(ctx, t, base+path, tok, lastEventID)
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		cancel()
		require.Failf(t, "unexpected status", "GET %s: status %d, want 200", path, resp.StatusCode)
	}
	require.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
	c := &sseClient{t: t, cancel: cancel, done: make(chan struct{}), changed: make(chan struct{}, 1)}
	go c.read(resp)
	t.Cleanup(c.close)
	return c
}

func request(t *testing.T, url, tok, lastEventID string) *http.Response {
	t.Helper()
	return requestCtx(context.Background(), t, url, tok, lastEventID)
}

func requestCtx(ctx context.Context, t *testing.T, url, tok, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

func (c *sseClient) read(resp *http.Response) {
	defer close(c.done)
	defer func() { _ = resp.Body.Close() }()
	sc := bufio.NewScanner(resp.Body)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				c.mu.Lock()
				c.events = append(c.events, cur)
				c.mu.Unlock()
				c.notify()
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
			c.mu.Lock()
			c.comments = append(c.comments, strings.TrimSpace(line[1:]))
			c.mu.Unlock()
			c.notify()
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.Type = line[7:]
		case strings.HasPrefix(line, "data: "):
			cur.Data = line[6:]
		}
	}
	c.notify()
}

func (c *sseClient) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// close ends the request and waits for the reader.
func (c *sseClient) close() {
	c.cancel()
	<-c.done
}

func (c *sseClient) snapshot() ([]sseEvent, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sseEvent(nil), c.events...), append([]string(nil), c.comments...)
}

// waitEvents waits until the client has read n events (or more), failing the
// test after a generous deadline (not a performance assertion).
func (c *sseClient) waitEvents(n int) []sseEvent {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		events, _ := c.snapshot()
		if len(events) >= n {
			return events
		}
		select {
		case <-c.changed:
		case <-c.done:
			events, _ = c.snapshot()
			require.GreaterOrEqual(c.t, len(events), n, "stream ended after %d events: %v", len(events), events)
			return events
		case <-deadline:
			require.Failf(c.t, "too few events in time", "read %d events, want %d: %v", len(events), n, events)
		}
	}
}

// waitEnded waits until the server ends the stream.
func (c *sseClient) waitEnded() {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		require.FailNow(c.t, "stream did not end")
	}
}

func httpServer(t *testing.T, s *realtime.Server) string {
	t.Helper()
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// waitComment waits until the client has read a comment line containing s.
func (c *sseClient) waitComment(s string) {
	c.t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		_, comments := c.snapshot()
		for _, cm := range comments {
			if strings.Contains(cm, s) {
				return
			}
		}
		select {
		case <-c.changed:
		case <-c.done:
			require.Failf(c.t, "stream ended", "without a %q comment: %v", s, comments)
		case <-deadline:
			require.Failf(c.t, "comment not seen in time", "no %q comment: %v", s, comments)
		}
	}
}
