// Package pgnotify is a realtime.Bus over PostgreSQL LISTEN/NOTIFY: every
// instance LISTENs on one channel and receives every event any instance
// NOTIFYs, itself included — the fan-out between serve instances on the
// SQS and Postgres brokers (decision 0012).
//
// NOTIFY is not durable: an instance that is not listening at that moment
// misses the event, which suits realtime notifications (the route has
// already acknowledged them; a browser that misses one resumes or reloads).
// A payload is limited to 8000 bytes, so an event is sent as base64 chunks,
// all NOTIFYd in one transaction: PostgreSQL delivers a transaction's
// notifications together, in order, after its commit, and never interleaves
// another transaction's among them.
package pgnotify

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/handlers/realtime"
)

// DefaultChannel is the LISTEN channel unless Config.Channel sets one.
const DefaultChannel = "eventpipe_realtime"

// chunkSize keeps a notification (header + base64 chunk) under PostgreSQL's
// 8000-byte payload limit.
const chunkSize = 7800

// Config configures a Bus.
type Config struct {
	// DSN is the PostgreSQL connection string. Required.
	DSN string
	// Channel is the LISTEN/NOTIFY channel; every instance of one
	// deployment must use the same. Default DefaultChannel.
	Channel string
	// ReconnectInterval is the pause before listening again after the
	// listening connection is lost (events NOTIFYd meanwhile are missed).
	// Default 1 s.
	ReconnectInterval time.Duration
	Logger            *slog.Logger
}

var channelName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Bus is the LISTEN/NOTIFY bus. It implements realtime.Bus.
type Bus struct {
	cfg  Config
	pool *pgxpool.Pool
}

var _ realtime.Bus = (*Bus)(nil)

// New connects the publishing pool; Subscribe opens the listening
// connection.
func New(ctx context.Context, cfg Config) (*Bus, error) {
	if cfg.Channel == "" {
		cfg.Channel = DefaultChannel
	}
	if cfg.ReconnectInterval == 0 {
		cfg.ReconnectInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	if cfg.DSN == "" {
		errs = append(errs, errors.New("pgnotify: DSN is required"))
	}
	if !channelName.MatchString(cfg.Channel) {
		errs = append(errs, fmt.Errorf("pgnotify: channel %q: want a lower-case identifier", cfg.Channel))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgnotify: %w", err)
	}
	pc.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgnotify: connect: %w", err)
	}
	return &Bus{cfg: cfg, pool: pool}, nil
}

// Close closes the publishing pool. Subscriptions end with their context.
func (b *Bus) Close() { b.pool.Close() }

// Publish NOTIFYs e, in chunks, in one transaction.
func (b *Bus) Publish(ctx context.Context, e realtime.Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("pgnotify: encode: %w", err)
	}
	enc := base64.RawStdEncoding.EncodeToString(body)
	n := (len(enc) + chunkSize - 1) / chunkSize
	key := frameKey()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgnotify: publish: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	for i := range n {
		chunk := enc[i*chunkSize : min((i+1)*chunkSize, len(enc))]
		payload := key + " " + strconv.Itoa(i) + " " + strconv.Itoa(n) + " " + chunk
		if _, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", b.cfg.Channel, payload); err != nil {
			return fmt.Errorf("pgnotify: notify: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgnotify: publish: %w", err)
	}
	return nil
}

// Subscribe LISTENs (before it returns) and delivers every event until ctx
// ends. A lost connection is reopened after ReconnectInterval; what was
// NOTIFYd in between is missed, and logged as a gap.
func (b *Bus) Subscribe(ctx context.Context) (<-chan realtime.Event, error) {
	conn, err := b.listen(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan realtime.Event)
	go func() {
		defer close(out)
		for {
			err := b.receive(ctx, conn, out)
			_ = conn.Close(context.WithoutCancel(ctx))
			if ctx.Err() != nil {
				return
			}
			b.cfg.Logger.WarnContext(ctx, "pgnotify: listening connection lost; events meanwhile are missed", slog.Any("error", err))
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(b.cfg.ReconnectInterval):
				}
				if conn, err = b.listen(ctx); err == nil {
					break
				}
				b.cfg.Logger.WarnContext(ctx, "pgnotify: listen", slog.Any("error", err))
			}
		}
	}()
	return out, nil
}

func (b *Bus) listen(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, b.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgnotify: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.cfg.Channel}.Sanitize()); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("pgnotify: listen %s: %w", b.cfg.Channel, err)
	}
	return conn, nil
}

// receive reassembles chunked frames until the connection fails or ctx
// ends. A transaction's chunks arrive contiguously, so one frame is pending
// at a time; a frame left incomplete (a publisher cut off mid-way cannot
// commit, so only a bug could) is dropped with a log line.
func (b *Bus) receive(ctx context.Context, conn *pgx.Conn, out chan<- realtime.Event) error {
	var (
		pendingKey string
		parts      []string
	)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		key, i, total, chunk, ok := parse(n.Payload)
		if !ok {
			b.cfg.Logger.WarnContext(ctx, "pgnotify: malformed notification dropped", slog.String("channel", n.Channel))
			continue
		}
		if i == 0 {
			if pendingKey != "" {
				b.cfg.Logger.WarnContext(ctx, "pgnotify: incomplete frame dropped", slog.String("frame", pendingKey))
			}
			pendingKey, parts = key, make([]string, 0, total)
		}
		if key != pendingKey || i != len(parts) {
			b.cfg.Logger.WarnContext(ctx, "pgnotify: out-of-order chunk dropped", slog.String("frame", key))
			pendingKey, parts = "", nil
			continue
		}
		parts = append(parts, chunk)
		if len(parts) < total {
			continue
		}
		pendingKey = ""
		body, err := base64.RawStdEncoding.DecodeString(strings.Join(parts, ""))
		var e realtime.Event
		if err == nil {
			err = json.Unmarshal(body, &e)
		}
		if err != nil {
			b.cfg.Logger.WarnContext(ctx, "pgnotify: undecodable frame dropped", slog.String("frame", key), slog.Any("error", err))
			continue
		}
		select {
		case out <- e:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func parse(p string) (key string, i, total int, chunk string, ok bool) {
	f := strings.SplitN(p, " ", 4)
	if len(f) != 4 {
		return "", 0, 0, "", false
	}
	i, err1 := strconv.Atoi(f[1])
	total, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || i < 0 || total < 1 || i >= total {
		return "", 0, 0, "", false
	}
	return f[0], i, total, f[3], true
}

func frameKey() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
