package interviews

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/route"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the interviews spec: interview-completed (credit settlement) and
// report-generate (reports), the bot callbacks API that produces
// interview-completed's messages when interviews.api_addr is set, and sample
// traffic when interviews.sample_traffic is on.
var Module = spec.Module{
	Name:     "interviews",
	Enabled:  func(c config.Config) bool { return c.Interviews.Enabled },
	Topology: "interviews",
	Catalog:  func() route.Set { return Handlers{}.Routes() },
	Build:    build,
	Commands: commands,
}

// build builds the spec. The store is PostgreSQL when the service has
// a database — report requests then go through the transactional outbox, so a
// relay must run (serve's, outbox.relay, or `eventpipe relay`) — and the
// memory store otherwise (the embedded mode: nothing survives a restart).
// With interviews.api_addr set, the bot callbacks API (BotAPI) listens there,
// an intake server (serve's drain closes it first); it publishes straight to
// interview-completed, as the spec's Fargate API does: there is no business
// row of ours to commit with it.
func build(_ context.Context, d spec.Deps) (spec.Parts, error) {
	var store Store = NewMemory()
	if d.DB != nil {
		pg, err := NewPostgres(d.DB, d.Config.Postgres.Schema)
		if err != nil {
			return spec.Parts{}, err
		}
		store = pg
	}
	gen, err := generator(d)
	if err != nil {
		return spec.Parts{}, err
	}
	parts := spec.Parts{Routes: Handlers{
		Store:      store,
		Outbox:     d.Outbox,
		Generator:  gen,
		Logger:     d.Logger,
		StaleClaim: d.Config.Interviews.StaleClaim,
	}.Routes()}
	if pg, ok := store.(*Postgres); ok && d.Verifier != nil {
		parts.Endpoints = append(parts.Endpoints, spec.Endpoint{
			Pattern: ReportRetryPath,
			Handler: &ReportRetryAPI{DB: d.DB, Store: pg, Outbox: d.Outbox, Auth: d.Verifier, Logger: d.Logger},
		})
	}
	if addr := d.Config.Interviews.APIAddr; addr != "" {
		api := &BotAPI{Producer: NewProducer(d.Publisher, d.Logger), Logger: d.Logger}
		if d.Verifier != nil {
			api.Auth = d.Verifier
		} else {
			d.Logger.Info("interviews bot callbacks API open: admin JWTs are not verified (admin.token_secret_env, admin.token_jwks_url)",
				slog.String("spec", "interviews"), slog.String("addr", addr))
		}
		parts.Servers = append(parts.Servers, spec.Server{Name: APIServer, Addr: addr, Handler: api.Handler(), Intake: true})
	}
	if d.Config.Interviews.SampleTraffic {
		parts.Workers = append(parts.Workers, spec.Worker{Name: "interviews sample traffic", Run: func(ctx context.Context) error {
			_, err := SampleTraffic(ctx, store, NewProducer(d.Publisher, d.Logger), d.Logger)
			return err
		}})
	}
	return parts, nil
}

// generator returns the report generator: the LLM client from the llm
// section. Without an API key it is an error, except with
// interviews.sample_traffic, where the built-in sample generator stands in so
// that `make run` needs no account.
func generator(d spec.Deps) (ReportGenerator, error) {
	client, err := llm.New(d.LLM)
	if err != nil {
		if d.Config.Interviews.SampleTraffic {
			d.Logger.Warn("interviews: no LLM configured, reports come from the sample generator",
				slog.String("api_key_env", d.LLM.APIKeyEnv), slog.Any("reason", err))
			return SampleGenerator{}, nil
		}
		return nil, fmt.Errorf("report generator: %w", err)
	}
	return LLMGenerator{Client: client}, nil
}
