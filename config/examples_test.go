package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/config"
)

// config/examples/<broker>.yaml loads as written, names its broker and runs
// the demo and every spec (app/cli's examples test runs them on the real
// brokers).
func TestExamplesEnableEverySpecOnTheirBroker(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("examples/*.yaml")
	require.NoError(t, err)
	var kinds []string
	for _, f := range files {
		cfg, err := config.Load(f, nil)
		require.NoError(t, err, f)
		kind := strings.TrimSuffix(filepath.Base(f), ".yaml")
		kinds = append(kinds, kind)
		assert.Equal(t, kind, cfg.Broker.Kind, f)
		assert.NotEmpty(t, cfg.Postgres.DSN, "%s: the stores, inbox and outbox are PostgreSQL's", f)
		for name, on := range map[string]bool{
			"demo": cfg.Demo.Enabled, "interviews": cfg.Interviews.Enabled, "stackup": cfg.StackUp.Enabled,
			"disputes": cfg.Disputes.Enabled, "booking": cfg.Booking.Enabled, "joinlink": cfg.JoinLink.Enabled,
		} {
			assert.True(t, on, "%s: %s.enabled", f, name)
		}
	}
	assert.ElementsMatch(t, []string{config.KindRabbitMQ, config.KindSQS, config.KindPostgres}, kinds)
}
