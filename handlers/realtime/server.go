package realtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	stackuprt "github.com/eventpipe/eventpipe/handlers/stackup/realtime"
)

// Config configures a Server.
type Config struct {
	// Verifier checks bearer tokens. Required.
	Verifier Verifier
	// Bus brings events to every instance (decision 0012). Nil: this
	// instance delivers what it consumes to its own clients only — enough
	// for one instance, and for several on the in-process broker, whose
	// subscribers each receive every message.
	Bus Bus
	// Registerer receives the eventpipe_realtime_* metrics; nil registers
	// nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger

	// WindowSize is how many recent events per channel a reconnecting
	// client can resume from (Last-Event-ID); it also recognises
	// redeliveries. Default 256; negative turns both off.
	WindowSize int
	// WindowBytes caps the data kept in one channel's window; the oldest
	// events go first (the newest is always kept). Default 256 KiB.
	WindowBytes int
	// WindowTTL is how long an event stays resumable, and how long a
	// channel without clients keeps its window. Default 5 min.
	WindowTTL time.Duration
	// ClientBuffer is how many events may wait for one slow client before
	// it is disconnected. Default 64.
	ClientBuffer int
	// Heartbeat is the interval of the comment line that keeps idle streams
	// (and proxies) alive. Default 15 s.
	Heartbeat time.Duration
	// WriteTimeout bounds one write to a client; a stalled connection is
	// closed after it. Default 10 s.
	WriteTimeout time.Duration
	// RetryHint is the SSE retry field: how long a browser waits before
	// reconnecting. Default 3 s.
	RetryHint time.Duration
	// MaxDataBytes bounds payload.data; a larger one is rejected
	// (dead-lettered with the reason). Default 64 KiB.
	MaxDataBytes int
	// AllowedOrigins are the browser origins (scheme://host[:port]) of pages
	// on other sites allowed to open streams (CORS; EventSource sends no
	// credentials cookie, the token is in the URL or header). Empty: same
	// origin only.
	AllowedOrigins []string
	// DemoEventTypes are the event types the demo page listens to
	// (EventSource only reports named events it was asked for). Default:
	// DefaultDemoEventTypes.
	DemoEventTypes []string
}

// DefaultDemoEventTypes are the SseEventType names the spec mentions.
var DefaultDemoEventTypes = []string{
	"ERROR", "DOC_STATE", "REPO_STATE", "SESSION_MESSAGE", "FEEDBACK_READY",
	"ANALYSIS_PROGRESS", "SESSION_MESSAGE_DELTA", "SESSION_MESSAGE_AUDIO", "QUESTION_POOL_PROGRESS", "FEEDBACK_PROGRESS",
	"question.created",
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.WindowSize == 0 {
		c.WindowSize = 256
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = 256 << 10
	}
	if c.WindowTTL == 0 {
		c.WindowTTL = 5 * time.Minute
	}
	if c.ClientBuffer == 0 {
		c.ClientBuffer = 64
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.RetryHint == 0 {
		c.RetryHint = 3 * time.Second
	}
	if c.MaxDataBytes == 0 {
		c.MaxDataBytes = 64 << 10
	}
	if c.DemoEventTypes == nil {
		c.DemoEventTypes = DefaultDemoEventTypes
	}
}

// Validate reports every problem with the configuration.
func (c Config) Validate() error {
	var errs []error
	if c.Verifier == nil {
		errs = append(errs, errors.New("realtime: a token verifier is required"))
	}
	if c.ClientBuffer < 1 {
		errs = append(errs, fmt.Errorf("realtime: client buffer must be at least 1, got %d", c.ClientBuffer))
	}
	if c.Heartbeat <= 0 || c.WriteTimeout <= 0 || c.WindowTTL <= 0 || c.RetryHint <= 0 {
		errs = append(errs, errors.New("realtime: heartbeat, write timeout, window TTL and retry hint must be positive"))
	}
	if c.MaxDataBytes < 1 {
		errs = append(errs, fmt.Errorf("realtime: max data bytes must be at least 1, got %d", c.MaxDataBytes))
	}
	return errors.Join(errs...)
}

// Server is one instance's RealTime server: the Sink of the realtime route,
// the hub of its SSE clients and their HTTP handler.
type Server struct {
	cfg   Config
	m     *metrics
	hub   *Hub
	relay *relay

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped chan struct{} // closed by Close: open streams end
	once    sync.Once
}

// New builds a server; Start runs it.
func New(cfg Config) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := newMetrics(cfg.Registerer)
	window := max(cfg.WindowSize, 0)
	hub := newHub(window, cfg.WindowBytes, cfg.ClientBuffer, cfg.WindowTTL, m)
	return &Server{
		cfg: cfg, m: m, hub: hub,
		relay:   &relay{bus: cfg.Bus, hub: hub, maxData: cfg.MaxDataBytes, m: m, logger: cfg.Logger},
		stopped: make(chan struct{}),
	}, nil
}

// Sink is what handlers/stackup/realtime's route delivers to
// (stackup.Deps.Sink).
func (s *Server) Sink() stackuprt.Sink { return s.relay }

// Start subscribes to the bus (before it returns, so nothing published
// afterwards is missed) and starts the loops that feed the hub and sweep
// expired windows. They stop when ctx ends or Close is called.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("realtime: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	var events <-chan Event
	if s.cfg.Bus != nil {
		var err error
		if events, err = s.cfg.Bus.Subscribe(ctx); err != nil {
			cancel()
			return err
		}
	}
	s.started, s.cancel = true, cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sweep := time.NewTicker(min(s.cfg.WindowTTL, time.Minute))
		defer sweep.Stop()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					if ctx.Err() == nil {
						s.cfg.Logger.Warn("realtime: the fan-out bus subscription ended (its broker closed?); this instance's clients get no more events")
					}
					events = nil
					continue
				}
				s.hub.Deliver(e)
			case <-sweep.C:
				s.hub.sweep()
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// Close stops the loops and ends every open stream (clients reconnect,
// elsewhere, with Last-Event-ID). It does not close the Bus.
func (s *Server) Close() error {
	s.once.Do(func() { close(s.stopped) })
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
	return nil
}
