package disputes

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/eventpipe/eventpipe/app/jsonhttp"
)

// HTTPReverser asks the payment system to reverse a dispute's debit over
// HTTP (disputes.reversal_url). The spec names the effect ("auto-reverse
// eligible failed_but_debited UPI disputes") but no interface; this one is
// eventpipe's:
//
//	POST <URL>
//	Authorization: Bearer <Token>          (when Token is set)
//	Idempotency-Key: dispute-reversal:<dispute id>
//	Content-Type: application/json
//	{"dispute_id": "dsp_…", "txn_id": "txn_…"}
//
//	200, 201 or 202, optionally {"reversal_id": "…"}
//
// A network error (connection refused, reset), the timeout, 408, 409 (the
// key's first request still running), 425, 429 and any 5xx are transient (a
// Retry-After in seconds is honoured); any other status is permanent: the
// request itself is refused, and asking again cannot help. A 2xx whose body
// is not JSON still counts as reversed — the status says it happened.
type HTTPReverser struct {
	// URL is the reversal endpoint. Required.
	URL string
	// Token is the bearer token; "" sends no Authorization header.
	Token string
	// Client sends the requests; http.DefaultClient when nil.
	Client *http.Client
	// Timeout bounds one call; DefaultReversalTimeout when 0.
	Timeout time.Duration
}

var _ Reverser = (*HTTPReverser)(nil)

// maxReversalResponse bounds the response body read.
const maxReversalResponse = 1 << 20

// Reverse implements Reverser.
func (h *HTTPReverser) Reverse(ctx context.Context, req ReversalRequest) (ReversalResult, error) {
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = DefaultReversalTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ans, err := jsonhttp.Post(ctx, jsonhttp.Call{
		Client: h.Client, URL: h.URL, Token: h.Token, MaxResponse: maxReversalResponse,
		Header: http.Header{IdempotencyKeyHeader: {req.IdempotencyKey}},
		What:   "reverse dispute " + req.DisputeID,
		Body: struct {
			DisputeID string `json:"dispute_id"`
			TxnID     string `json:"txn_id"`
		}{req.DisputeID, req.TxnID},
		Retryable: func(code int) bool {
			return code == http.StatusConflict || code == http.StatusTooEarly || jsonhttp.Retryable408429And5xx(code)
		},
	})
	if err != nil {
		return ReversalResult{}, err
	}
	var out struct {
		ReversalID string `json:"reversal_id"`
	}
	_ = json.Unmarshal(ans.Body, &out)
	return ReversalResult{Reference: out.ReversalID}, nil
}
