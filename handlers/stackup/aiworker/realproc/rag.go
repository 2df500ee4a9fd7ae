package realproc

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// DefaultContextChunks is how many chunks a RAG search puts in a prompt.
const DefaultContextChunks = 5

// aiLogTimeout bounds one ai-logs call: a slow Core must not hold a job.
const aiLogTimeout = 2 * time.Second

var (
	_ llmgen.Retriever  = (*Processors)(nil)
	_ llmgen.CallLogger = (*Processors)(nil)
)

// Retrieve implements llmgen.Retriever with Core's internal API (§10): the
// query embedded (EmbeddingModel), then a hybrid search (the query's text
// too) over documentIDs, scoped by Core to the request's user (§10.1). A
// request without a user id is not searched (§10.1: "user_id 를 못 얻는
// 경우 AI 는 검색을 건너뛰고 (none) 으로 폴백"); a failed embedding or search
// is logged and gives no context (§10: "실패 시 … 빈 결과로 폴백").
func (p *Processors) Retrieve(ctx context.Context, job aiworker.Job, documentIDs []int64, query string) []string {
	user := userID(job)
	query = strings.TrimSpace(query)
	if user <= 0 || query == "" || len(documentIDs) == 0 {
		return nil
	}
	log := job.Logger()
	vecs, err := p.cfg.Model.Embed(ctx, llm.EmbeddingRequest{Model: p.cfg.EmbeddingModel, Input: []string{truncateRunes(query, ChunkRunes)},
		Dimensions: p.cfg.EmbeddingDimensions})
	if err != nil || len(vecs) != 1 {
		log.WarnContext(ctx, "stackup RAG: query not embedded; generating without context", slog.Any("error", err))
		return nil
	}
	hits, err := p.cfg.Core.Search(ctx, internalapi.SearchRequest{UserID: user, DocumentIDs: documentIDs, QueryEmbedding: vecs[0],
		QueryText: query, TopK: p.cfg.ContextChunks})
	if err != nil {
		log.WarnContext(ctx, "stackup RAG: Core's search failed; generating without context", slog.Any("error", err))
		return nil
	}
	texts := make([]string, 0, len(hits))
	for _, h := range hits {
		texts = append(texts, h.Text)
	}
	return texts
}

// LogCall implements llmgen.CallLogger: one ai-logs row per model call
// (POST /api/internal/ai-logs), fire-and-forget — a failure is logged,
// never the job's.
func (p *Processors) LogCall(ctx context.Context, job aiworker.Job, c llmgen.Call) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), aiLogTimeout)
	defer cancel()
	l := internalapi.AILog{Model: c.Model, RequestType: c.RequestType, TraceID: job.Envelope.TraceID,
		PromptTokens: c.Usage.PromptTokens, CompletionTokens: c.Usage.CompletionTokens, LatencyMs: c.Latency.Milliseconds(), Success: c.Err == nil}
	if l.TraceID == "" {
		l.TraceID = msgctx.TraceID(ctx)
	}
	if u := userID(job); u > 0 {
		l.UserID = &u
	}
	if l.Model == "" {
		l.Model = "unknown"
	}
	if err := p.cfg.Core.LogAICall(ctx, l); err != nil {
		job.Logger().WarnContext(ctx, "stackup ai-log not recorded (ignored)", slog.String("request_type", c.RequestType), slog.Any("error", err))
	}
}

// complete is Model.Complete with its ai-logs row.
func (p *Processors) complete(ctx context.Context, job aiworker.Job, req llm.Request) (llm.Response, error) {
	start := time.Now()
	resp, err := p.cfg.Model.Complete(ctx, req)
	model := resp.Model
	if model == "" {
		model = req.Model
	}
	p.LogCall(ctx, job, llmgen.Call{RequestType: req.Schema.Name, Model: model, Usage: resp.Usage, Latency: time.Since(start), Err: err})
	return resp, err
}
