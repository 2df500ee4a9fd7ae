package stackup

import (
	"fmt"
	"slices"
	"strings"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
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
	case ProcessorsSample, "":
		return aiworker.SampleProcessors(), nil
	case ProcessorsLLM:
		client, err := llm.New(cfg)
		if err != nil {
			return aiworker.Processors{}, fmt.Errorf("stackup processors: %w", err)
		}
		g := llmgen.Generator{Client: client}
		return aiworker.Processors{Questions: g, Followup: g, Feedback: g}, nil
	default:
		return aiworker.Processors{}, fmt.Errorf("stackup processors: unknown kind %q (want %s or %s)", kind, ProcessorsSample, ProcessorsLLM)
	}
}

// GenerateQueues are the queues ProcessorsLLM can serve.
const GenerateQueues = "ai.generate.questions,ai.generate.followup,ai.generate.feedback"
