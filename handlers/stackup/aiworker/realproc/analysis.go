package realproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ledongthuc/pdf"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/handlers/stackup/internalapi"
)

// ANALYSIS_PROGRESS phases (§5.13: EXTRACTING → SUMMARIZING → EMBEDDING).
const (
	PhaseExtracting  = "EXTRACTING"
	PhaseSummarizing = "SUMMARIZING"
	PhaseEmbedding   = "EMBEDDING"
)

// MaxSourceRunes bounds the text given to the model for a summary: the rest
// is still embedded.
const MaxSourceRunes = 60000

// target names the analysed document.
type target struct {
	Type       string // RESUME, COVER_LETTER, REPOSITORY, WEB
	ID         int64  // targetId of the callback
	Kind       string // the documentPath's segment: resume, cover_letter, …
	DocumentID int64  // analyzedDocumentId (embedding upsert)
}

// progress emits ANALYSIS_PROGRESS to the request's user: volatile, and a
// failed publish is only logged by the worker (§5.12).
func progress(ctx context.Context, job aiworker.Job, t target, phase, message string) {
	job.NotifyUser(ctx, catalog.EventAnalysisProgress, map[string]any{
		"targetType": t.Type, "targetId": t.ID, "phase": phase, "message": message,
	})
}

// AnalyzeResume implements aiworker.ResumeAnalyzer.
func (p *Processors) AnalyzeResume(ctx context.Context, job aiworker.Job, r *catalog.AnalyzeResumeV1) (aiworker.Analysis, error) {
	t := target{Type: catalog.TargetResume, ID: r.ResumeID, Kind: "resume", DocumentID: r.AnalyzedDocumentID}
	return p.analyzePDF(ctx, job, t, r.FilePath)
}

// AnalyzeCoverLetter implements aiworker.CoverLetterAnalyzer.
func (p *Processors) AnalyzeCoverLetter(ctx context.Context, job aiworker.Job, r *catalog.AnalyzeCoverLetterV1) (aiworker.Analysis, error) {
	t := target{Type: catalog.TargetCoverLetter, ID: r.CoverLetterID, Kind: "cover_letter", DocumentID: r.AnalyzedDocumentID}
	return p.analyzePDF(ctx, job, t, r.FilePath)
}

func (p *Processors) analyzePDF(ctx context.Context, job aiworker.Job, t target, key string) (aiworker.Analysis, error) {
	progress(ctx, job, t, PhaseExtracting, "문서에서 텍스트를 추출하고 있습니다")
	data, err := p.getObject(ctx, "ResumeAnalyzeError", key)
	if err != nil {
		return aiworker.Analysis{}, err
	}
	text, err := PDFText(data)
	if err != nil {
		return aiworker.Analysis{}, err
	}
	return p.analyzeText(ctx, job, t, text)
}

// getObject reads key, classifying what no retry fixes.
func (p *Processors) getObject(ctx context.Context, typ, key string) ([]byte, error) {
	data, err := p.cfg.Objects.Get(ctx, key)
	if err == nil {
		return data, nil
	}
	if failure.Of(err) != failure.Permanent {
		return nil, err
	}
	code := CodeDocumentNotFound
	if tooLarge(err) {
		code = CodeDocumentTooLarge
	}
	return nil, domain(typ, code, err)
}

// tooLarge reports an error of an object over the store's limit: one in
// err's chain has a TooLarge method reporting true (s3store.ErrTooLarge).
func tooLarge(err error) bool {
	var t interface{ TooLarge() bool }
	return errors.As(err, &t) && t.TooLarge()
}

// ErrNoTextLayer is wrapped by PDFText's error for a PDF whose pages carry
// no text (a scan): §5.5's "PDF에 텍스트 레이어가 없습니다".
var ErrNoTextLayer = errors.New("PDF에 텍스트 레이어가 없습니다 (the PDF has no text layer)")

// PDFText extracts the text of a PDF. A corrupt PDF and one without a text
// layer are PDF_PARSE_FAILED, not retriable.
func PDFText(data []byte) (text string, err error) {
	defer func() {
		// The parser panics on some malformed files; a panic here is a
		// corrupt document, not a bug of ours.
		if r := recover(); r != nil {
			text, err = "", domain("ResumeAnalyzeError", CodePDFParseFailed, fmt.Errorf("corrupt PDF: %v", r))
		}
	}()
	if !bytes.HasPrefix(bytes.TrimLeft(data, "\x00\t\r\n "), []byte("%PDF-")) {
		return "", domain("ResumeAnalyzeError", CodePDFParseFailed, errors.New("not a PDF: no %PDF- header"))
	}
	rd, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", domain("ResumeAnalyzeError", CodePDFParseFailed, fmt.Errorf("corrupt PDF: %w", err))
	}
	plain, err := rd.GetPlainText()
	if err != nil {
		return "", domain("ResumeAnalyzeError", CodePDFParseFailed, fmt.Errorf("corrupt PDF: %w", err))
	}
	raw, err := io.ReadAll(plain)
	if err != nil {
		return "", domain("ResumeAnalyzeError", CodePDFParseFailed, fmt.Errorf("corrupt PDF: %w", err))
	}
	text = strings.ToValidUTF8(string(raw), "")
	if strings.TrimFunc(text, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) == "" {
		return "", domain("ResumeAnalyzeError", CodePDFParseFailed, ErrNoTextLayer)
	}
	return text, nil
}

const summarySystem = `You analyse a candidate's document (a resume, a cover letter, a web resume or a code repository) for a technical interview.
Return summary: 2 to 4 sentences of plain text (no markdown) on the candidate's experience and strengths;
techStack: the technologies the document shows, as short names ("Java", "Spring Boot", "PostgreSQL"), most important first, at most 20;
markdown: a GFM document with "## " headings (## 요약, ## 기술 스택, ## 경력, ## 프로젝트, ## 강점과 확인할 점 — omit a section without material)
that an interviewer reads before the interview. Write in the document's language.`

const summarySchema = `{"type":"object","additionalProperties":false,"required":["summary","techStack","markdown"],"properties":{
"summary":{"type":"string"},"techStack":{"type":"array","items":{"type":"string"}},"markdown":{"type":"string"}}}`

type summaryOut struct {
	Summary   string   `json:"summary"`
	TechStack []string `json:"techStack"`
	Markdown  string   `json:"markdown"`
}

// analyzeText is the chain every analysis shares after extraction: summary,
// tech stack and GFM document by the model (stored at documentPath), then
// the text's chunks embedded and upserted through Core's internal API.
func (p *Processors) analyzeText(ctx context.Context, job aiworker.Job, t target, text string) (aiworker.Analysis, error) {
	text = normalizeSpace(text)
	progress(ctx, job, t, PhaseSummarizing, "문서를 요약하고 있습니다")
	input, _ := json.Marshal(map[string]any{"documentType": t.Type, "text": truncateRunes(text, MaxSourceRunes)})
	resp, err := p.complete(ctx, job, llm.Request{
		Messages:      []llm.Message{{Role: "system", Content: summarySystem}, {Role: "user", Content: string(input)}},
		Schema:        llm.Schema{Name: "document_analysis", JSON: json.RawMessage(summarySchema), Strict: true},
		PromptVersion: llmgen.PromptVersion,
	})
	if err != nil {
		if errors.Is(err, llm.ErrInvalidOutput) {
			return aiworker.Analysis{}, fmt.Errorf("summarise %s %d: %w: %w", t.Kind, t.ID, aiworker.ErrSchemaInvalid, err)
		}
		return aiworker.Analysis{}, fmt.Errorf("summarise %s %d: %w", t.Kind, t.ID, err)
	}
	var out summaryOut
	if err := json.Unmarshal(resp.Content, &out); err != nil || strings.TrimSpace(out.Summary) == "" || strings.TrimSpace(out.Markdown) == "" {
		return aiworker.Analysis{}, fmt.Errorf("summarise %s %d: empty summary or document: %w", t.Kind, t.ID, aiworker.ErrSchemaInvalid)
	}
	docPath := fmt.Sprintf("analyzed/%s/%d/summary.md", t.Kind, t.ID)
	if err := p.cfg.Objects.Put(ctx, docPath, []byte(out.Markdown), "text/markdown; charset=utf-8"); err != nil {
		return aiworker.Analysis{}, fmt.Errorf("store %s: %w", docPath, err)
	}
	a := aiworker.Analysis{Summary: strings.TrimSpace(out.Summary), TechStack: cleanStack(out.TechStack), DocumentPath: docPath}

	progress(ctx, job, t, PhaseEmbedding, "문서를 검색용으로 색인하고 있습니다")
	user := userID(job)
	if user <= 0 {
		// §10: the upsert needs the owner; without one the document is
		// analysed but not searchable (embeddingChunkCount null).
		p.cfg.Logger.WarnContext(ctx, "stackup analysis: no context.userId, chunks not embedded",
			slog.String("message_id", job.Envelope.MessageID), slog.Int64("document_id", t.DocumentID))
		return a, nil
	}
	chunks := Chunks(text, ChunkRunes, p.cfg.MaxChunks)
	vecs, err := p.cfg.Model.Embed(ctx, llm.EmbeddingRequest{Model: p.cfg.EmbeddingModel, Input: chunks, Dimensions: p.cfg.EmbeddingDimensions})
	if err != nil {
		return aiworker.Analysis{}, fmt.Errorf("embed %s %d: %w", t.Kind, t.ID, err)
	}
	wire := make([]internalapi.Chunk, len(chunks))
	for i, c := range chunks {
		wire[i] = internalapi.Chunk{Index: i, Text: c, Embedding: vecs[i]}
	}
	n, err := p.cfg.Core.PutEmbeddings(ctx, user, t.DocumentID, wire)
	if err != nil {
		return aiworker.Analysis{}, fmt.Errorf("upsert embeddings of document %d: %w", t.DocumentID, classifyCore(err))
	}
	a.EmbeddingChunkCount = &n
	return a, nil
}

// classifyCore classes an internal API error: a 4xx other than 408/429 is
// permanent (a bad request, a foreign or deleted document), the rest
// transient.
func classifyCore(err error) error {
	var api *internalapi.APIError
	if errors.As(err, &api) && api.Status/100 == 4 && api.Status != http.StatusRequestTimeout && api.Status != http.StatusTooManyRequests {
		return failure.AsPermanent(err)
	}
	return failure.AsTransient(err, 0)
}

// Chunks splits text into pieces of about size runes on paragraph, line or
// sentence boundaries, at most max of them.
func Chunks(text string, size, max int) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for _, para := range strings.Split(text, "\n") {
		for utf8.RuneCountInString(para) > size {
			cut := cutPoint(para, size)
			flush()
			cur.WriteString(para[:cut])
			flush()
			para = para[cut:]
		}
		if utf8.RuneCountInString(cur.String())+utf8.RuneCountInString(para) > size {
			flush()
		}
		if cur.Len() > 0 {
			cur.WriteByte('\n')
		}
		cur.WriteString(para)
	}
	flush()
	if len(out) > max {
		out = out[:max]
	}
	if len(out) == 0 {
		out = []string{strings.TrimSpace(text)}
	}
	return out
}

// cutPoint is the byte offset of a boundary near size runes into s: the
// last sentence end or space before it, else size runes.
func cutPoint(s string, size int) int {
	end, n := len(s), 0
	for i := range s {
		if n == size {
			end = i
			break
		}
		n++
	}
	head := s[:end]
	for _, sep := range []string{". ", "。", "! ", "? ", " "} {
		if i := strings.LastIndex(head, sep); i > end/2 {
			return i + len(sep)
		}
	}
	return end
}

func normalizeSpace(s string) string {
	lines := strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n")
	out := lines[:0]
	blank := false
	for _, l := range lines {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			if blank {
				continue
			}
			blank = true
		} else {
			blank = false
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func cleanStack(in []string) []string {
	out := []string{}
	seen := map[string]bool{}
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" || seen[strings.ToLower(s)] || len(out) == 20 {
			continue
		}
		seen[strings.ToLower(s)] = true
		out = append(out, s)
	}
	return out
}
