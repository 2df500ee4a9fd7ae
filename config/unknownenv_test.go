package config_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/config"
)

// An EVENTPIPE_* variable nothing reads is reported, with the variable it
// most likely means; known variables, the secrets the *_env keys name and
// the tools' variables are not.
func TestUnknownEnvVars(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.LLM.APIKeyEnv = "EVENTPIPE_MY_LLM_KEY"
	got := config.UnknownEnvVars(cfg, []string{
		"PATH=/bin",
		"EVENTPIPE_BROKER=rabbitmq", "EVENTPIPE_SQS_BATCH_SIZE=5", "EVENTPIPE_CONFIG=x.yaml",
		"EVENTPIPE_REALTIME_TOKEN_SECRET=s", "EVENTPIPE_ADMIN_TOKEN_SECRET=s", "EVENTPIPE_MY_LLM_KEY=k",
		"EVENTPIPE_TEST_POSTGRES_DSN=x", "EVENTPIPE_CHROMIUM=/usr/bin/chromium", "EVENTPIPE_BENCH=1",
		"EVENTPIPE_SQS_BATCHSIZE=5",        // underscores
		"EVENTPIPE_INTERVIEW_ENABLED=true", // a letter missing
		"EVENTPIPE_RABBIT_URL=amqp://x",    // a word cut short
		"EVENTPIPE_JOINLINK_ADMIN_TOKEN_ENV=X",
		"EVENTPIPE_COMPLETELY_DIFFERENT=1",
	})
	assert.Equal(t, []config.UnknownEnvVar{
		{Name: "EVENTPIPE_SQS_BATCHSIZE", Suggestion: "EVENTPIPE_SQS_BATCH_SIZE"},
		{Name: "EVENTPIPE_INTERVIEW_ENABLED", Suggestion: "EVENTPIPE_INTERVIEWS_ENABLED"},
		{Name: "EVENTPIPE_RABBIT_URL", Suggestion: "EVENTPIPE_RABBITMQ_URL"},
		{Name: "EVENTPIPE_JOINLINK_ADMIN_TOKEN_ENV"},
		{Name: "EVENTPIPE_COMPLETELY_DIFFERENT"},
	}, got)
	assert.Equal(t, "EVENTPIPE_SQS_BATCHSIZE is not a variable eventpipe reads; it is ignored; did you mean EVENTPIPE_SQS_BATCH_SIZE?", got[0].String())
}
