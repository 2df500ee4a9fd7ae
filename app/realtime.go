package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/config"
	"github.com/eventpipe/eventpipe/handlers/realtime"
	"github.com/eventpipe/eventpipe/handlers/realtime/pgnotify"
	"github.com/eventpipe/eventpipe/handlers/stackup"
)

// realtimeEnabled reports whether the StackUp spec runs with the realtime
// role, which serves the SSE streams.
func realtimeEnabled(cfg config.Config) bool {
	if !cfg.StackUp.Enabled {
		return false
	}
	roles, err := stackup.ParseRoles(cfg.StackUp.Roles)
	return err == nil && roles.Realtime
}

// realtimeFanout is the bus that carries events between instances
// (decision 0012).
func realtimeFanout(cfg config.Config) string {
	if f := cfg.Realtime.Fanout; f != "auto" {
		return f
	}
	switch cfg.Broker.Kind {
	case config.KindRabbitMQ:
		return "rabbitmq"
	case config.KindSQS, config.KindPostgres:
		return "postgres"
	}
	return "none" // memory: every subscription gets every notification
}

// realtimeInstance names this instance's RabbitMQ fan-out queue.
func realtimeInstance(cfg config.Config) string {
	if cfg.Realtime.Instance != "" {
		return cfg.Realtime.Instance
	}
	host, _ := os.Hostname()
	return strings.ToLower(host + "-" + watermill.NewShortUUID())
}

// newRealtime builds the RealTime server and its bus; closeBus releases the
// bus.
func newRealtime(ctx context.Context, cfg config.Config, ps broker.PubSub, reg prometheus.Registerer, logger *slog.Logger) (srv *realtime.Server, closeBus func(), err error) {
	c := cfg.Realtime
	secret := os.Getenv(c.TokenSecretEnv)
	if len(secret) < realtime.MinSecretLen {
		return nil, nil, fmt.Errorf("realtime: $%s must hold a token secret of at least %d bytes", c.TokenSecretEnv, realtime.MinSecretLen)
	}
	var bus realtime.Bus
	closeBus = func() {}
	switch realtimeFanout(cfg) {
	case "rabbitmq":
		bus = realtime.WatermillBus{Publisher: ps, Subscriber: ps, Logger: logger}
	case "postgres":
		b, err := pgnotify.New(ctx, pgnotify.Config{DSN: cfg.Postgres.DSN, Channel: c.NotifyChannel, Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		bus, closeBus = b, b.Close
	}
	var origins []string
	for _, o := range strings.Split(c.AllowedOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			origins = append(origins, o)
		}
	}
	srv, err = realtime.New(realtime.Config{
		Verifier:       realtime.HMACVerifier{Secret: []byte(secret)},
		Bus:            bus,
		Registerer:     reg,
		Logger:         logger,
		WindowSize:     c.Window,
		WindowBytes:    c.WindowBytes,
		WindowTTL:      c.WindowTTL,
		ClientBuffer:   c.ClientBuffer,
		Heartbeat:      c.Heartbeat,
		MaxDataBytes:   c.MaxDataBytes,
		AllowedOrigins: origins,
	})
	if err != nil {
		closeBus()
		return nil, nil, err
	}
	return srv, closeBus, nil
}
