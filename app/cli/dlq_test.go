package cli_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/cli"
)

func TestDLQUsageErrors(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		environ []string
		args    []string
		want    string
	}{
		"no queue":      {[]string{"EVENTPIPE_BROKER=sqs"}, []string{"dlq", "peek"}, "--queue is required"},
		"memory broker": {nil, []string{"dlq", "redrive", "--queue", "x-dlq"}, "memory broker"},
	} {
		r := run(t, c.environ, c.args...)
		assert.Equal(t, cli.ExitUsage, r.code, name)
		assert.Contains(t, r.stderr, c.want, name)
	}
}
