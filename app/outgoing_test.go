package app_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app"
	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Strict on publish, at the outbox: the writer every spec gets refuses a body
// the strict schema of its queue refuses (permanently: the same code writes
// the same body again), writes nothing of that call, and lets a valid body
// and a topic without a schema through.
func TestTheSpecsOutboxHoldsWritesToTheStrictSchemas(t *testing.T) {
	t.Parallel()
	var w outbox.Writer
	mod := spec.Module{
		Name:    "outgoing-test",
		Enabled: func(config.Config) bool { return true },
		Catalog: func() route.Set { return nil },
		Build: func(_ context.Context, d spec.Deps) (spec.Parts, error) {
			w = d.Outbox
			return spec.Parts{}, nil
		},
	}
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	ctx := context.Background()
	svc, err := app.NewWithModules(ctx, cfg, slog.New(slog.DiscardHandler), []spec.Module{mod})
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	require.NotNil(t, w)

	write := func(topic string, bodies ...string) error {
		return outbox.Unit(ctx, func(ctx context.Context) error {
			var msgs []*message.Message
			for _, b := range bodies {
				msgs = append(msgs, message.NewMessage("m-"+b[:8], []byte(b)))
			}
			return w.Write(ctx, topic, msgs...)
		})
	}
	valid := `{"interviewId":"6650a1b2c3d4e5f607182930","organizationId":"6650a1b2c3d4e5f607182931"}`
	unknown := `{"interviewId":"6650a1b2c3d4e5f607182930","organizationId":"6650a1b2c3d4e5f607182931","extra":1}`

	err = write("report-generate", valid, unknown)
	require.Error(t, err)
	assert.Equal(t, failure.Permanent, failure.Of(err))
	var invalid *schemas.ValidationError
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, schemas.Strict, invalid.Mode)
	assert.Contains(t, err.Error(), "additional properties 'extra' not allowed")

	require.NoError(t, write("report-generate", valid))
	require.NoError(t, write("demo.greetings", `{"no":"schema, the encoder is the check"}`))
}

// What every spec's own producers write through the outbox meets the strict
// schemas: each spec's sample traffic runs its round trip on the memory
// broker, and no write is refused.
func TestEverySpecsSampleTrafficMeetsTheStrictSchemas(t *testing.T) {
	t.Setenv("EVENTPIPE_TEST_OUTGOING_RT_SECRET", "outgoing-test-secret-at-least-32-bytes!")
	cfg := config.Defaults()
	cfg.Admin.Addr = ""
	cfg.StackUp.Enabled, cfg.StackUp.Processors, cfg.StackUp.SampleInterval = true, "sample", 100*time.Millisecond
	cfg.Realtime.Addr, cfg.Realtime.TokenSecretEnv = "127.0.0.1:0", "EVENTPIPE_TEST_OUTGOING_RT_SECRET"
	cfg.Interviews.Enabled, cfg.Interviews.SampleTraffic, cfg.Interviews.APIAddr = true, true, ""
	cfg.LLM.APIKeyEnv = "EVENTPIPE_TEST_UNSET_LLM_KEY" // the sample report generator
	cfg.Disputes.Enabled, cfg.Disputes.SampleTraffic, cfg.Disputes.APIAddr = true, true, ""
	cfg.JoinLink.Enabled, cfg.JoinLink.SampleTraffic, cfg.JoinLink.EnableScheduler = true, true, true
	cfg.Booking.Enabled, cfg.Booking.SampleTraffic = true, true

	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc, err := app.New(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	// Each spec's round trip, through at least one outbox write.
	for _, line := range []string{
		`msg="stackup analysis applied"`, `msg="stackup question pool set"`, // core → ai-worker → core
		`msg="report completed"`,               // interviews: interview-completed → report-generate
		`msg="disputes sample traffic: done"`,  // disputes: domain-events from the store's outbox
		`msg="booking sample traffic: done"`,   // booking
		`msg="join-link sample traffic: done"`, // join-link
	} {
		require.Eventually(t, func() bool { return strings.Contains(logs.String(), line) }, 20*time.Second, 20*time.Millisecond,
			"%s never logged:\n%s", line, logs.String())
	}
	cancel()
	require.NoError(t, <-done)
	assert.NotContains(t, logs.String(), "body refused")
}
