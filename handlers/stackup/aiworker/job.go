package aiworker

import (
	"context"

	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// NewJob returns a Job for env whose notifications go to notify (the
// worker's own publish path in production; a recorder in a processor's
// tests). A nil notify drops them.
func NewJob(env envelope.Envelope, notify func(ctx context.Context, messageType, eventType string, data any)) Job {
	return Job{Envelope: env, notify: notify}
}
