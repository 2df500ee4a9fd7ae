package outbox

import "context"

// SetAfterPublish installs a hook run after Publish and before the rows are
// marked; an error aborts the claim like a crash at that point.
func SetAfterPublish(r *Relay, f func(ctx context.Context) error) { r.afterPublish = f }

// ListenerAppName exposes the listener's application_name for tests that
// kill its connection.
var ListenerAppName = listenerAppName

// Permanent exposes the relay's classification of Publish errors.
var Permanent = permanent
