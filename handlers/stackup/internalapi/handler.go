package internalapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// MaxBodyBytes bounds a request body (8 MiB: about 500 chunks of 1536
// dimensions as JSON); a larger one is a 413.
const MaxBodyBytes = 8 << 20

// KeyHeader is the header every request authenticates with (§10).
const KeyHeader = "X-Internal-API-Key"

// MinAPIKeyLen is the shortest API key the server accepts to start with.
const MinAPIKeyLen = 16

// Wire types: the JSON the endpoints read and write.
type (
	tokenJSON struct {
		UserID    int64     `json:"userId"`
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expiresAt"`
	}
	setTokenJSON struct {
		Token     string     `json:"token"`
		ExpiresAt *time.Time `json:"expiresAt"`
	}
	chunkJSON struct {
		Index     int       `json:"index"`
		Text      string    `json:"text"`
		Embedding []float32 `json:"embedding"`
	}
	embeddingsJSON struct {
		UserID int64        `json:"userId"`
		Chunks *[]chunkJSON `json:"chunks"`
	}
	embeddingsResultJSON struct {
		DocumentID int64 `json:"documentId"`
		ChunkCount int   `json:"chunkCount"`
	}
	searchJSON struct {
		UserID         int64     `json:"userId"`
		DocumentIDs    []int64   `json:"documentIds"`
		QueryEmbedding []float32 `json:"queryEmbedding"`
		QueryText      string    `json:"queryText"`
		TopK           int       `json:"topK"`
	}
	resultJSON struct {
		DocumentID int64   `json:"documentId"`
		ChunkIndex int     `json:"chunkIndex"`
		Text       string  `json:"text"`
		Score      float64 `json:"score"`
	}
	searchResultJSON struct {
		Results []resultJSON `json:"results"`
	}
	aiLogJSON struct {
		UserID           *int64 `json:"userId"`
		Model            string `json:"model"`
		RequestType      string `json:"requestType"`
		TraceID          string `json:"traceId"`
		PromptTokens     int    `json:"promptTokens"`
		CompletionTokens int    `json:"completionTokens"`
		LatencyMs        int64  `json:"latencyMs"`
		Success          *bool  `json:"success"`
	}
	errorJSON struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
)

// Handler serves the API over HTTP; every request must carry KeyHeader
// equal to apiKey (compared in constant time), else 401. Bodies are JSON of
// at most MaxBodyBytes; unknown fields are ignored (lenient on consume).
// Errors are {"error":{"code","message"}}. Neither tokens nor bodies are
// ever logged.
func Handler(api *API, apiKey string, logger *slog.Logger) (http.Handler, error) {
	if len(apiKey) < MinAPIKeyLen {
		return nil, fmt.Errorf("stackup internal API: the API key has %d bytes, want at least %d", len(apiKey), MinAPIKeyLen)
	}
	if logger == nil {
		logger = slog.Default()
	}
	h := &handler{api: api, keySum: sha256.Sum256([]byte(apiKey)), logger: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/internal/users/{userId}/github-token", h.getToken)
	mux.HandleFunc("PUT /api/internal/users/{userId}/github-token", h.putToken)
	mux.HandleFunc("PUT /api/internal/documents/{documentId}/embeddings", h.putEmbeddings)
	mux.HandleFunc("DELETE /api/internal/documents/{documentId}", h.deleteDocument)
	mux.HandleFunc("POST /api/internal/embeddings/search", h.search)
	mux.HandleFunc("POST /api/internal/ai-logs", h.aiLog)
	return h.authenticate(mux), nil
}

type handler struct {
	api    *API
	keySum [sha256.Size]byte
	logger *slog.Logger
}

// authenticate answers 401 before anything else, unknown paths included.
// Comparing the keys' digests keeps the comparison constant-time in the
// key's length too.
func (h *handler) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := sha256.Sum256([]byte(r.Header.Get(KeyHeader)))
		if subtle.ConstantTimeCompare(got[:], h.keySum[:]) != 1 {
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "missing or wrong "+KeyHeader)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e errorJSON
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

// fail answers err with its status; only unexpected errors are logged (the
// error text, which never holds a token).
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var in *InputError
	switch {
	case errors.As(err, &in):
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", in.Msg)
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "NOT_FOUND", err.Error())
	case errors.Is(err, ErrForeignDocument):
		writeError(w, http.StatusForbidden, "FORBIDDEN", err.Error())
	case errors.Is(err, ErrDeletedDocument):
		writeError(w, http.StatusGone, "GONE", err.Error())
	case errors.Is(err, ErrTokensOff):
		writeError(w, http.StatusServiceUnavailable, "TOKENS_OFF", err.Error())
	default:
		h.logger.ErrorContext(r.Context(), "stackup internal API request failed", slog.String("method", r.Method),
			slog.String("pattern", r.Pattern), slog.Any("error", err))
		writeError(w, http.StatusInternalServerError, "INTERNAL", "internal error")
	}
}

// decode reads the body into v: 413 over MaxBodyBytes, 400 for anything but
// one JSON value. It reports whether the handler may go on.
func (h *handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	err := dec.Decode(v)
	if err == nil {
		if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
			err = errors.New("more than one JSON value")
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "TOO_LARGE", fmt.Sprintf("the body is larger than %d bytes", MaxBodyBytes))
	default:
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", "malformed JSON body: "+err.Error())
	}
	return false
}

// pathID reads the positive id of the path's wildcard name.
func (h *handler) pathID(w http.ResponseWriter, r *http.Request, name string) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue(name), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "BAD_REQUEST", name+" must be a positive number")
		return 0, false
	}
	return id, true
}

func (h *handler) getToken(w http.ResponseWriter, r *http.Request) {
	user, ok := h.pathID(w, r, "userId")
	if !ok {
		return
	}
	t, err := h.api.GitHubToken(r.Context(), user)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, tokenJSON{UserID: t.UserID, Token: t.Token, ExpiresAt: t.ExpiresAt.UTC()})
}

func (h *handler) putToken(w http.ResponseWriter, r *http.Request) {
	user, ok := h.pathID(w, r, "userId")
	if !ok {
		return
	}
	var req setTokenJSON
	if !h.decode(w, r, &req) {
		return
	}
	if req.ExpiresAt == nil {
		h.fail(w, r, badInput("expiresAt is required"))
		return
	}
	if err := h.api.SetGitHubToken(r.Context(), user, req.Token, *req.ExpiresAt); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) putEmbeddings(w http.ResponseWriter, r *http.Request) {
	doc, ok := h.pathID(w, r, "documentId")
	if !ok {
		return
	}
	var req embeddingsJSON
	if !h.decode(w, r, &req) {
		return
	}
	if req.Chunks == nil {
		h.fail(w, r, badInput("chunks is required ([] removes every chunk)"))
		return
	}
	chunks := make([]Chunk, len(*req.Chunks))
	for i, c := range *req.Chunks {
		chunks[i] = Chunk(c)
	}
	n, err := h.api.PutEmbeddings(r.Context(), req.UserID, doc, chunks)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, embeddingsResultJSON{DocumentID: doc, ChunkCount: n})
}

func (h *handler) deleteDocument(w http.ResponseWriter, r *http.Request) {
	doc, ok := h.pathID(w, r, "documentId")
	if !ok {
		return
	}
	user, err := strconv.ParseInt(r.URL.Query().Get("userId"), 10, 64)
	if err != nil {
		h.fail(w, r, badInput("the userId query parameter is required (a positive number)"))
		return
	}
	if err := h.api.DeleteDocument(r.Context(), user, doc); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	var req searchJSON
	if !h.decode(w, r, &req) {
		return
	}
	hits, err := h.api.Search(r.Context(), SearchRequest(req))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := searchResultJSON{Results: make([]resultJSON, len(hits))}
	for i, hit := range hits {
		out.Results[i] = resultJSON(hit)
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *handler) aiLog(w http.ResponseWriter, r *http.Request) {
	var req aiLogJSON
	if !h.decode(w, r, &req) {
		return
	}
	l := AILog{UserID: req.UserID, Model: req.Model, RequestType: req.RequestType, TraceID: req.TraceID,
		PromptTokens: req.PromptTokens, CompletionTokens: req.CompletionTokens, LatencyMs: req.LatencyMs, Success: req.Success == nil || *req.Success}
	if err := h.api.LogAICall(r.Context(), l); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}
