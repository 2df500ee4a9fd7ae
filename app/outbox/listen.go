package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Listener reconnect backoff.
const (
	listenMinBackoff = 100 * time.Millisecond
	listenMaxBackoff = 30 * time.Second
)

// listenerAppName names the listener's connection in pg_stat_activity, so an
// operator (or a test) can tell it apart.
func listenerAppName(schema string) string { return "eventpipe-outbox-listener:" + schema }

// listen holds a dedicated connection LISTENing on the outbox channel and
// signals wake for every notification, until ctx ends. A pooled connection
// would not do: notifications arrive only on the session that listens. It
// reconnects with backoff when the connection drops, and signals wake after
// every (re)connect because notifications sent while it was away are lost.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	backoff := listenMinBackoff
	for {
		err := r.listenOnce(ctx, signal, func() { backoff = listenMinBackoff })
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox listener disconnected, reconnecting", "error", err, "in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, listenMaxBackoff)
	}
}

func (r *Relay) listenOnce(ctx context.Context, signal, connected func()) error {
	cc := r.pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = listenerAppName(r.cfg.Schema)
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel(r.cfg.Schema)}.Sanitize()); err != nil {
		return err
	}
	connected()
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
