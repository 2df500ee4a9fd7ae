package app_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/booking"
)

// serve with booking.gateway_addr: the gateway listens, the HTTP controller
// and the Socket.IO server (spoken here at the wire, Engine.IO 4 long
// polling) enqueue the same logical event under one id, the processor applies
// it once, and the drain closes the gateway.
func TestServeBookingGateway(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.Booking.Enabled = true
	cfg.Booking.GatewayAddr = "127.0.0.1:0"
	var logs syncBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, logger)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	addr := svc.ServerAddr(booking.GatewayServer)
	require.NotEmpty(t, addr)
	base := "http://" + addr

	sid := "bks_" + strings.ToLower(watermill.NewShortUUID())
	var code int
	var body string
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	code, body = send(t, http.MethodPost, base+booking.HTTPPath,
		`{"bookingSessionId":"`+sid+`","type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{"slot":"10:00"}}`)
	require.Equal(t, http.StatusAccepted, code, body)
	var accepted struct{ EventID string }
	require.NoError(t, json.Unmarshal([]byte(body), &accepted))
	require.True(t, booking.IsEventID(accepted.EventID), body)

	code, body = send(t, http.MethodPost, base+booking.HTTPPath, `{"bookingSessionId":`)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, `"error":"invalid booking-session event`)

	// Socket.IO v4 over Engine.IO 4 long polling: open, connect to the
	// namespace with the session in auth, emit with ack id 1, read the ack.
	sio := base + booking.SocketIOPath + "?EIO=4&transport=polling"
	code, body = send(t, http.MethodGet, sio, "")
	require.Equal(t, http.StatusOK, code, body)
	open, isOpen := strings.CutPrefix(body, "0")
	require.True(t, isOpen, "Engine.IO open packet: %s", body)
	var handshake struct {
		SID      string   `json:"sid"`
		Upgrades []string `json:"upgrades"`
	}
	require.NoError(t, json.Unmarshal([]byte(open), &handshake), body)
	require.NotEmpty(t, handshake.SID, body)
	assert.Equal(t, []string{"websocket"}, handshake.Upgrades)
	sio += "&sid=" + handshake.SID
	code, body = send(t, http.MethodPost, sio, `40`+booking.SocketNamespace+`,{"bookingSessionId":"`+sid+`"}`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = send(t, http.MethodGet, sio, "")
	require.Equal(t, http.StatusOK, code, body)
	require.True(t, strings.HasPrefix(body, `40`+booking.SocketNamespace+`,{"sid":`), "namespace connected: %s", body)
	code, body = send(t, http.MethodPost, sio, `42`+booking.SocketNamespace+`,1["`+booking.SocketEvent+`",{"type":"step-completed","occurredAt":"2026-11-30T09:14:03.512Z","stepId":"pick-slot","data":{"slot":"10:00"}}]`)
	require.Equal(t, http.StatusOK, code, body)
	code, body = send(t, http.MethodGet, sio, "")
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, `43`+booking.SocketNamespace+`,1[{"eventId":"`+accepted.EventID+`"}]`, body, "the same id as over HTTP")

	count := func(msg string) int {
		return strings.Count(logs.String(), `"msg":"`+msg+`"`)
	}
	require.Eventually(t, func() bool {
		return count("booking-session event applied") == 1 && count("duplicate booking-session event, acknowledged without effect") == 1
	}, 10*time.Second, 20*time.Millisecond, "one effect, one duplicate; logs:\n%s", logs.String())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "Run did not return after cancel")
	}
	_, err = net.Dial("tcp", addr)
	assert.Error(t, err, "the gateway is closed")
}
