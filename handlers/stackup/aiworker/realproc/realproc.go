// Package realproc implements the StackUp AI worker's processors on real
// services (decision 0032): objects in an S3 bucket, PDF text with
// github.com/ledongthuc/pdf, web pages through net/http and readability
// (codeberg.org/readeck/go-readability), repositories through GitHub's REST
// API with the token Core delegates (§10), summaries, embeddings, speech and
// transcripts on an OpenAI-compatible API (app/llm), embeddings stored,
// RAG context searched and every chat call logged through Core's internal
// API (decision 0033). The progress events of §5.12 go to the request's
// user or session through aiworker.Job; a failed publish, search or AI log
// is a warning, never the job's failure.
//
// Each external service sits behind a small interface declared here (Objects,
// Model, Core); production passes *s3store.Bucket, *llm.Client and
// *internalapi.Client, tests local fakes of the same services.
//
// # Failures
//
// What no retry can fix is a *aiworker.DomainError with its code and
// retriable false: PDF_PARSE_FAILED (a corrupt PDF, or one without a text
// layer — §5.5), and eventpipe's codes DOCUMENT_NOT_FOUND,
// DOCUMENT_TOO_LARGE, UNSUPPORTED_CONTENT_TYPE, WEB_FETCH_FAILED,
// REPOSITORY_NOT_FOUND, GITHUB_AUTH_FAILED, AUDIO_TOO_LARGE, STT_API_ERROR,
// and §5.9b's TTS_API_ERROR, TTS_STORAGE_FAILED. An outage (a 5xx, a
// timeout, a refused connection) stays failure.Transient: the worker retries
// it in process and then answers FAILED with retriable true. generate.tts
// and analyze.voice keep §6's direct model, where only a DomainError becomes
// a callback: on the last attempt (Config.MaxAttempts) their outage becomes
// TTS_API_ERROR / STT_API_ERROR with retriable true, so the session still
// hears of it.
package realproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// Error codes of the FAILED callbacks (see the package doc).
const (
	CodePDFParseFailed         = "PDF_PARSE_FAILED"
	CodeDocumentNotFound       = "DOCUMENT_NOT_FOUND"
	CodeDocumentTooLarge       = "DOCUMENT_TOO_LARGE"
	CodeUnsupportedContentType = "UNSUPPORTED_CONTENT_TYPE"
	CodeWebFetchFailed         = "WEB_FETCH_FAILED"
	CodeRepositoryNotFound     = "REPOSITORY_NOT_FOUND"
	CodeGitHubAuthFailed       = "GITHUB_AUTH_FAILED"
	CodeTTSAPIError            = "TTS_API_ERROR"
	CodeTTSStorageFailed       = "TTS_STORAGE_FAILED"
	CodeSTTAPIError            = "STT_API_ERROR"
	CodeAudioTooLarge          = "AUDIO_TOO_LARGE"
)

// Objects is the object store (an S3 bucket): keys exactly as the spec
// names them. *s3store.Bucket implements it. Get's error for an object over
// the store's limit has, in its chain, an error with a TooLarge method
// reporting true; a missing object is failure.Permanent.
type Objects interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, data []byte, contentType string) error
}

// Model is the OpenAI-compatible API. *llm.Client implements it.
type Model interface {
	Complete(ctx context.Context, req llm.Request) (llm.Response, error)
	Embed(ctx context.Context, req llm.EmbeddingRequest) ([][]float32, error)
	Speech(ctx context.Context, req llm.SpeechRequest) ([]byte, string, error)
	Transcribe(ctx context.Context, req llm.TranscriptionRequest) (llm.Transcription, error)
	Stream(ctx context.Context, req llm.StreamRequest, onDelta func(string) error) (string, error)
}

// Core is the part of Core's internal API (§10) the processors call.
// *internalapi.Client implements it.
type Core interface {
	GitHubToken(ctx context.Context, userID int64) (internalapi.GitHubToken, error)
	PutEmbeddings(ctx context.Context, userID, documentID int64, chunks []internalapi.Chunk) (int, error)
	Search(ctx context.Context, req internalapi.SearchRequest) ([]internalapi.Hit, error)
	LogAICall(ctx context.Context, l internalapi.AILog) error
}

var (
	_ Model = (*llm.Client)(nil)
	_ Core  = (*internalapi.Client)(nil)
)

// Defaults of Config.
const (
	DefaultEmbeddingModel = "text-embedding-3-small"
	DefaultTTSModel       = "gpt-4o-mini-tts"
	DefaultTTSVoice       = "alloy"
	DefaultSTTModel       = "whisper-1"
	DefaultGitHubAPIURL   = "https://api.github.com"
	// DefaultMaxPageBytes bounds a fetched web page: 2 MiB of HTML.
	DefaultMaxPageBytes = 2 << 20
	// DefaultMaxAudioBytes bounds an answer's audio: 25 MiB, OpenAI's
	// transcription upload limit.
	DefaultMaxAudioBytes = 25 << 20
	// DefaultFetchTimeout bounds one web page or GitHub call.
	DefaultFetchTimeout = 20 * time.Second
	// DefaultMaxChunks bounds the chunks embedded per document.
	DefaultMaxChunks = 64
	// ChunkRunes is the target length of one embedded chunk.
	ChunkRunes = 1200
)

// Config configures the processors.
type Config struct {
	Objects Objects
	Model   Model
	Core    Core
	// Generator is the chat-completion generator of questions, follow-ups
	// and feedback (llmgen) on Model. Its Retriever and Log default to the
	// processors' (Core's search and ai-logs).
	Generator llmgen.Generator
	// HTTPClient fetches web pages and calls GitHub; a client with
	// FetchTimeout, at most 5 redirects and (unless AllowPrivateNetworks)
	// no connections to loopback, private or link-local addresses when nil.
	HTTPClient *http.Client
	// AllowPrivateNetworks lets analyze.web fetch pages on private
	// addresses (tests; an intranet deployment). Off: a URL a user typed
	// cannot reach the worker's own network.
	AllowPrivateNetworks bool
	GitHubAPIURL         string
	EmbeddingModel       string
	// EmbeddingDimensions asks for vectors of this length (Core's
	// stackup.embedding_dimension); 0 keeps the model's.
	EmbeddingDimensions int
	TTSModel            string
	TTSVoice            string
	STTModel            string
	MaxPageBytes        int64
	MaxAudioBytes       int64
	FetchTimeout        time.Duration
	MaxChunks           int
	// ContextChunks is how many chunks a RAG search puts in a prompt;
	// DefaultContextChunks when 0.
	ContextChunks int
	// MaxAttempts is the worker's attempt limit (stackup.max_attempts): on
	// the last one tts and voice turn an outage into their FAILED code.
	MaxAttempts int
	Logger      *slog.Logger
}

func (c *Config) setDefaults() {
	if c.GitHubAPIURL == "" {
		c.GitHubAPIURL = DefaultGitHubAPIURL
	}
	if c.EmbeddingModel == "" {
		c.EmbeddingModel = DefaultEmbeddingModel
	}
	if c.TTSModel == "" {
		c.TTSModel = DefaultTTSModel
	}
	if c.TTSVoice == "" {
		c.TTSVoice = DefaultTTSVoice
	}
	if c.STTModel == "" {
		c.STTModel = DefaultSTTModel
	}
	if c.MaxPageBytes <= 0 {
		c.MaxPageBytes = DefaultMaxPageBytes
	}
	if c.MaxAudioBytes <= 0 {
		c.MaxAudioBytes = DefaultMaxAudioBytes
	}
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = DefaultFetchTimeout
	}
	if c.MaxChunks <= 0 {
		c.MaxChunks = DefaultMaxChunks
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.ContextChunks <= 0 {
		c.ContextChunks = DefaultContextChunks
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.HTTPClient == nil {
		c.HTTPClient = newFetchClient(c.FetchTimeout, c.AllowPrivateNetworks)
	}
}

// Validate reports every missing service.
func (c Config) Validate() error {
	var errs []error
	if c.Objects == nil {
		errs = append(errs, fmt.Errorf("object store %w", catalog.ErrNotConfigured))
	}
	if c.Model == nil {
		errs = append(errs, fmt.Errorf("model API %w", catalog.ErrNotConfigured))
	}
	if c.Core == nil {
		errs = append(errs, fmt.Errorf("internal API client of Core %w", catalog.ErrNotConfigured))
	}
	if c.Generator.Client == nil {
		errs = append(errs, fmt.Errorf("generator's chat client %w", catalog.ErrNotConfigured))
	}
	return errors.Join(errs...)
}

// Processors implements every aiworker processor on real services.
type Processors struct{ cfg Config }

// New checks cfg and returns the processors.
func New(cfg Config) (*Processors, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stackup real processors: %w", err)
	}
	p := &Processors{cfg: cfg}
	if p.cfg.Generator.Retriever == nil {
		p.cfg.Generator.Retriever = p
	}
	if p.cfg.Generator.Log == nil {
		p.cfg.Generator.Log = p
	}
	return p, nil
}

// All returns p for each of the nine request types.
func (p *Processors) All() aiworker.Processors {
	return aiworker.Processors{Resume: p, CoverLetter: p, Repository: p, Web: p, Questions: p.cfg.Generator,
		Followup: p, Feedback: p, TTS: p, Voice: p}
}

var (
	_ aiworker.ResumeAnalyzer      = (*Processors)(nil)
	_ aiworker.CoverLetterAnalyzer = (*Processors)(nil)
	_ aiworker.WebAnalyzer         = (*Processors)(nil)
	_ aiworker.RepositoryAnalyzer  = (*Processors)(nil)
	_ aiworker.SpeechSynthesizer   = (*Processors)(nil)
	_ aiworker.VoiceAnalyzer       = (*Processors)(nil)
	_ aiworker.FeedbackGenerator   = (*Processors)(nil)
	_ aiworker.FollowupGenerator   = (*Processors)(nil)
)

// domain is a permanent, classified failure.
func domain(typ, code string, err error) error {
	return &aiworker.DomainError{Type: typ, Code: code, Retriable: false, Err: err}
}

// lastAttempt reports whether ctx runs the worker's last in-process attempt
// (or runs outside the worker's policy, attempt 0: tests call directly).
func (p *Processors) lastAttempt(ctx context.Context) bool {
	n := msgctx.Attempt(ctx)
	return n == 0 || n >= p.cfg.MaxAttempts
}

// directFailure turns err of a direct-model queue (tts, voice) into its
// FAILED code: a permanent error at once, an outage on the last attempt
// (retriable true); earlier outages stay transient and are retried.
func (p *Processors) directFailure(ctx context.Context, typ, code string, err error) error {
	var de *aiworker.DomainError
	if errors.As(err, &de) {
		return err
	}
	if failure.Of(err) == failure.Transient {
		if !p.lastAttempt(ctx) {
			return err
		}
		return &aiworker.DomainError{Type: typ, Code: code, Retriable: true, Err: err}
	}
	return &aiworker.DomainError{Type: typ, Code: code, Retriable: false, Err: err}
}

// userID is the request's context.userId, 0 when absent.
func userID(job aiworker.Job) int64 {
	if u := job.Envelope.Context.UserID; u != nil {
		return *u
	}
	return 0
}
