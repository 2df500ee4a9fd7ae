package disputes

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/config"
)

// Module is the disputes spec without its AWS adapter: the events-worker on
// domain-events, the API (disputes.api_addr), the reminder sweep, the
// reversal worker (with disputes.reversal_url, or sample traffic's stand-in),
// and the ingest-worker on ingest-queue only with sample traffic (an
// in-memory object store). With disputes.s3_bucket set it refuses to start;
// the service runs NewModule with the S3 adapter.
var Module = NewModule(Adapters{})

// Adapters are the spec's parts outside handlers/ (AWS clients), handed in
// by the composition root.
type Adapters struct {
	// S3 builds the Objects the ingest-worker reads documents from
	// (app/s3store), used when disputes.s3_bucket is set.
	S3 func(ctx context.Context, c S3Config) (Objects, error)
}

// S3Config is what the S3 adapter needs: the disputes.s3_* settings and the
// SDK's region.
type S3Config struct {
	// Region is sqs.region (S3 notifies only queues in the bucket's
	// region); "" lets the SDK decide.
	Region string
	// Endpoint overrides the S3 endpoint (an emulator); "" lets the SDK
	// decide.
	Endpoint string
	// PathStyle addresses objects as endpoint/bucket/key.
	PathStyle bool
	// MaxObjectBytes is the largest document read; larger is permanent.
	MaxObjectBytes int64
	// Timeout bounds one GetObject, body included.
	Timeout time.Duration
}

// NewModule is the disputes spec with a.
func NewModule(a Adapters) spec.Module {
	return spec.Module{
		Name:     "disputes",
		Enabled:  func(c config.Config) bool { return c.Disputes.Enabled },
		Topology: "disputes",
		Catalog:  Catalog,
		Build:    func(ctx context.Context, d spec.Deps) (spec.Parts, error) { return build(ctx, d, a) },
	}
}

// build builds the spec. The store is PostgreSQL when the service has
// a database, events written to the transactional outbox in the business
// transaction (a relay publishes them); in memory otherwise, events published
// right after the in-memory commit (the service's outbox writer).
//
// The ingest-worker's object store is S3 (a.S3) when disputes.s3_bucket is
// set, the in-memory one only for sample traffic; with neither the
// ingest-worker is off, with a warning: the spec's two consumers are
// separate workers (§3 gives each its own Lambda), so the events-worker
// may run without it — and without the bucket, `topology apply` grants S3
// no right to send to ingest-queue, so no notification waits there unread.
//
// The API runs when disputes.api_addr is set, token-protected when the
// service verifies admin JWTs (d.Verifier) and open otherwise, with a
// warning. The reminder sweep always runs; the reversal worker runs with a
// Reverser (newReverser).
func build(ctx context.Context, d spec.Deps, a Adapters) (spec.Parts, error) {
	c := d.Config.Disputes
	var store Store = NewMemory(MemoryOptions{Outbox: d.Outbox, Logger: d.Logger})
	if d.DB != nil {
		pg, err := NewPostgres(d.DB, d.Config.Postgres.Schema, "")
		if err != nil {
			return spec.Parts{}, err
		}
		store = pg
	}
	h := Handlers{
		Store:        store,
		Inbox:        d.Inbox,
		Logger:       d.Logger,
		AMLThreshold: c.AMLThreshold,
		DefaultTAT:   c.DefaultTAT,
	}
	var sampleObjects *MemoryObjects
	switch {
	case c.S3Bucket != "":
		if a.S3 == nil {
			return spec.Parts{}, errors.New("disputes.s3_bucket needs the S3 adapter, which this build does not wire")
		}
		objects, err := a.S3(ctx, S3Config{
			Region: d.Config.SQS.Region, Endpoint: c.S3Endpoint, PathStyle: c.S3PathStyle,
			MaxObjectBytes: int64(c.S3MaxObjectSize), Timeout: c.S3Timeout,
		})
		if err != nil {
			return spec.Parts{}, err
		}
		h.Objects, h.Bucket = objects, c.S3Bucket
		d.Logger.Info("disputes ingest-worker reads S3", slog.String("bucket", c.S3Bucket), slog.String("queue", IngestQueue))
		if c.SampleTraffic {
			d.Logger.Info("disputes sample traffic records its document directly: the ingest-worker reads only disputes.s3_bucket")
		}
	case c.SampleTraffic:
		sampleObjects = NewMemoryObjects()
		h.Objects, h.Bucket = sampleObjects, SampleBucket
		d.Logger.Warn("disputes ingest-worker reads the in-memory object store (disputes.sample_traffic); set disputes.s3_bucket to read S3")
	default:
		d.Logger.Warn("disputes ingest-worker is off: disputes.s3_bucket is not set, so nothing consumes "+IngestQueue+
			" (set it, EVENTPIPE_DISPUTES_S3_BUCKET, to ingest the bucket's S3 ObjectCreated notifications)",
			slog.String("queue", IngestQueue))
	}
	reg := d.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	metrics, err := NewMetrics(reg, store)
	if err != nil {
		return spec.Parts{}, err
	}
	parts := spec.Parts{Routes: h.Routes()}
	sweep := &ReminderSweep{Store: store, Interval: c.ReminderSweepInterval, Logger: d.Logger, Metrics: metrics}
	parts.Workers = append(parts.Workers, spec.Worker{Name: "disputes reminder sweep", Run: sweep.Run})
	if reverser := newReverser(d); reverser != nil {
		w := &ReversalWorker{Store: store, Reverser: reverser, Interval: c.ReversalInterval, Timeout: c.ReversalTimeout,
			MaxAttempts: c.ReversalMaxAttempts, Logger: d.Logger, Metrics: metrics}
		parts.Workers = append(parts.Workers, spec.Worker{Name: "disputes reversal worker", Run: w.Run})
	}
	if c.APIAddr != "" {
		api := &API{Store: store, Logger: d.Logger}
		if d.Verifier != nil {
			api.Auth = d.Verifier
		} else {
			d.Logger.Warn("disputes API serves without authentication: admin JWTs are not verified; keep disputes.api_addr on loopback, "+
				"or set admin.token_secret_env / admin.token_jwks_url to require a bearer JWT", slog.String("addr", c.APIAddr))
		}
		// Intake: it takes work in, so serve's drain stops it first.
		parts.Servers = append(parts.Servers, spec.Server{Name: APIServer, Addr: c.APIAddr, Handler: api.Handler(), Intake: true})
	}
	if c.SampleTraffic {
		parts.Workers = append(parts.Workers, spec.Worker{Name: "disputes sample traffic", Run: func(ctx context.Context) error {
			return SampleTraffic(ctx, store, sampleObjects, d.Publisher, d.Logger)
		}})
	}
	return parts, nil
}

// APIServer names the disputes API in serve's logs and in
// Service.ServerAddr.
const APIServer = "disputes-api"

// newReverser is the auto-reversal's Reverser: the HTTP client of
// disputes.reversal_url when set, the logging stand-in only for sample
// traffic, and otherwise none — the reversal worker is off and eligible
// disputes wait, pending in dispute_reversals, until the URL is configured
// (decision 0022: unlike join-link's bulkRegister, nothing false is recorded
// without it, so the spec's other effects need not stop).
func newReverser(d spec.Deps) Reverser {
	c := d.Config.Disputes
	switch {
	case c.ReversalURL != "":
		token := ""
		if d.Getenv != nil && c.ReversalTokenEnv != "" {
			token = d.Getenv(c.ReversalTokenEnv)
		}
		return &HTTPReverser{URL: c.ReversalURL, Token: token, Timeout: c.ReversalTimeout}
	case c.SampleTraffic:
		d.Logger.Warn("disputes auto-reversal uses the logging stand-in (disputes.sample_traffic): nothing is reversed; set disputes.reversal_url")
		return LogReverser{Logger: d.Logger}
	default:
		d.Logger.Warn("disputes auto-reversal is off: disputes.reversal_url is not set (EVENTPIPE_DISPUTES_REVERSAL_URL), so eligible " +
			"failed_but_debited UPI disputes stay pending in dispute_reversals (eventpipe_disputes_reversals_pending) until it is")
		return nil
	}
}
