package stackup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/spec"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/realproc"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// Role names, as configuration spells them.
const (
	RoleCore     = "core"
	RoleAIWorker = "ai-worker"
	RoleRealtime = "realtime"
)

// ParseRoles reads a comma-separated role list ("core,ai-worker,realtime").
func ParseRoles(s string) (Roles, error) {
	var r Roles
	for _, name := range splitList(s) {
		switch name {
		case RoleCore:
			r.Core = true
		case RoleAIWorker:
			r.AIWorker = true
		case RoleRealtime:
			r.Realtime = true
		default:
			return Roles{}, fmt.Errorf("stackup: unknown role %q (want %s, %s or %s)", name, RoleCore, RoleAIWorker, RoleRealtime)
		}
	}
	if r == (Roles{}) {
		return Roles{}, fmt.Errorf("stackup: no role in %q", s)
	}
	return r, nil
}

// ParseQueues reads a comma-separated list of request queues ("" = all).
func ParseQueues(s string) []string { return splitList(s) }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}

// Processor kinds, as configuration spells them.
const (
	// ProcessorsReal runs every queue on real services (realproc,
	// decision 0032): the llm section's API, an S3 bucket, Core's internal
	// API and GitHub. The default; a missing credential fails start-up.
	ProcessorsReal = "real"
	// ProcessorsSample is aiworker.SampleProcessors: deterministic
	// stand-ins for every queue, no external service. The embedded default.
	ProcessorsSample = "sample"
	// ProcessorsLLM runs generate.questions, generate.followup and
	// generate.feedback on an OpenAI-compatible chat-completions API
	// (llmgen). This build has no processors for the analyze.* and
	// generate.tts queues: leave them out of the AI worker's queues.
	ProcessorsLLM = "llm"
)

// NewProcessors returns the processors of kind; cfg configures the LLM
// client for ProcessorsLLM (its API key comes from cfg.APIKeyEnv).
func NewProcessors(kind string, cfg llm.Config) (aiworker.Processors, error) {
	switch kind {
	case ProcessorsSample:
		return aiworker.SampleProcessors(), nil
	case ProcessorsLLM:
		client, err := llm.New(cfg)
		if err != nil {
			return aiworker.Processors{}, fmt.Errorf("stackup processors: %w", err)
		}
		g := llmgen.Generator{Client: client}
		return aiworker.Processors{Questions: g, Followup: g, Feedback: g}, nil
	case ProcessorsReal:
		return aiworker.Processors{}, fmt.Errorf("stackup processors: %s needs its services: use NewRealProcessors", kind)
	default:
		return aiworker.Processors{}, fmt.Errorf("stackup processors: unknown kind %q (want %s, %s or %s)", kind, ProcessorsReal, ProcessorsSample, ProcessorsLLM)
	}
}

// GenerateQueues are the queues ProcessorsLLM can serve.
const GenerateQueues = "ai.generate.questions,ai.generate.followup,ai.generate.feedback"

// ObjectsConfig is what the object store adapter is built from
// (stackup.s3_*; the region is sqs.region's).
type ObjectsConfig struct {
	Bucket    string
	Region    string
	Endpoint  string
	PathStyle bool
}

// Adapters are the AWS-side parts the composition root hands the spec
// (handlers never import an AWS service client).
type Adapters struct {
	// Objects builds the real processors' object store (app/s3store).
	Objects func(ctx context.Context, c ObjectsConfig) (realproc.Objects, error)
}

// NewRealProcessors builds ProcessorsReal from d's configuration and
// environment. Every missing part is named in one error, with the way to
// run without it: serve refuses to start rather than fall back to a stand-in.
func NewRealProcessors(ctx context.Context, d spec.Deps, a Adapters) (aiworker.Processors, error) {
	c := d.Config.StackUp
	getenv := d.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	var errs []error
	client, err := llm.New(d.LLM)
	if err != nil {
		errs = append(errs, err)
	}
	key := getenv(c.InternalAPIKeyEnv)
	if key == "" {
		errs = append(errs, fmt.Errorf("internal API of Core: $%s (stackup.internal_api_key_env) is empty", c.InternalAPIKeyEnv))
	}
	base := c.InternalURL
	if base == "" && c.InternalAddr != "" {
		base = "http://" + c.InternalAddr
	}
	if base == "" {
		errs = append(errs, errors.New("internal API of Core: stackup.internal_url and stackup.internal_addr are empty"))
	}
	var objects realproc.Objects
	switch {
	case c.S3Bucket == "":
		errs = append(errs, errors.New("object store: stackup.s3_bucket is empty"))
	case a.Objects == nil:
		errs = append(errs, errors.New("object store: this build has no S3 adapter (stackup.NewModule without Adapters.Objects)"))
	default:
		if objects, err = a.Objects(ctx, ObjectsConfig{Bucket: c.S3Bucket, Region: d.Config.SQS.Region, Endpoint: c.S3Endpoint, PathStyle: c.S3PathStyle}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return aiworker.Processors{}, fmt.Errorf("stackup.processors %s: %w\n(set them, or stackup.processors=%s for the offline stand-ins)", ProcessorsReal, err, ProcessorsSample)
	}
	p, err := realproc.New(realproc.Config{
		Objects: objects, Model: client, Core: &internalapi.Client{BaseURL: base, APIKey: key},
		Generator: llmgen.Generator{Client: client}, GitHubAPIURL: c.GitHubAPIURL,
		EmbeddingDimensions: c.EmbeddingDimension, MaxAttempts: c.MaxAttempts, Logger: d.Logger,
	})
	if err != nil {
		return aiworker.Processors{}, err
	}
	return p.All(), nil
}
