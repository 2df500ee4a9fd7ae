package disputes

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/eventpipe/eventpipe/app/failure"
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
	body, err := json.Marshal(struct {
		DisputeID string `json:"dispute_id"`
		TxnID     string `json:"txn_id"`
	}{req.DisputeID, req.TxnID})
	if err != nil {
		return ReversalResult{}, failure.AsPermanent(err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return ReversalResult{}, failure.AsPermanent(fmt.Errorf("reverse dispute %s: %w", req.DisputeID, err))
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set(IdempotencyKeyHeader, req.IdempotencyKey)
	if h.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+h.Token)
	}
	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return ReversalResult{}, fmt.Errorf("reverse dispute %s: %w", req.DisputeID, err) // transient
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReversalResponse))
	if err != nil {
		return ReversalResult{}, fmt.Errorf("reverse dispute %s: read the response: %w", req.DisputeID, err)
	}
	switch code := resp.StatusCode; {
	case code == http.StatusOK || code == http.StatusCreated || code == http.StatusAccepted:
		var out struct {
			ReversalID string `json:"reversal_id"`
		}
		_ = json.Unmarshal(data, &out)
		return ReversalResult{Reference: out.ReversalID}, nil
	case code == http.StatusRequestTimeout || code == http.StatusConflict || code == http.StatusTooEarly ||
		code == http.StatusTooManyRequests || code >= 500:
		err := fmt.Errorf("reverse dispute %s: %s: %s", req.DisputeID, resp.Status, snippet(data))
		if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
			return ReversalResult{}, failure.AsTransient(err, time.Duration(s)*time.Second)
		}
		return ReversalResult{}, err
	default:
		return ReversalResult{}, failure.Permanentf("reverse dispute %s: %s: %s", req.DisputeID, resp.Status, snippet(data))
	}
}

// snippet is the start of a response body, for an error message.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
