package joinlink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/jsonhttp"
)

// HTTPGenerator calls the online-session subsystem's bulkRegister (iface-05,
// v1.0.0) over HTTP:
//
//	POST <URL>
//	Authorization: Bearer <Token>          (when Token is set)
//	Content-Type: application/json
//	{"sessionId": 42, "role": "attendee", "batchSize": 100, "actorUserId": 7}
//
//	200, 201 or 202 {"jobId": "…", "total": 12}
//
// role and batchSize are left out when zero (the subsystem's defaults);
// actorUserId when 0. A network error, a timeout, 408, 429 and any 5xx are
// transient (the event is retried, the sweep is the net; a Retry-After in
// seconds is honoured); any other status, and a 2xx whose body is not the
// result, is permanent: retrying the same request cannot help. bulkRegister
// is idempotent on (registration, session) by contract, so a retry after an
// ambiguous failure registers nobody twice.
type HTTPGenerator struct {
	// URL is the bulkRegister endpoint. Required.
	URL string
	// Token is the bearer token; "" sends no Authorization header.
	Token string
	// Client sends the requests; http.DefaultClient when nil.
	Client *http.Client
	// Timeout bounds one call; 10 s when 0.
	Timeout time.Duration
}

var _ Generator = (*HTTPGenerator)(nil)

// maxBulkResponse bounds the response body read.
const maxBulkResponse = 1 << 20

// BulkRegister implements Generator.
func (g *HTTPGenerator) BulkRegister(ctx context.Context, req BulkRequest, actorUserID int64) (BulkResult, error) {
	timeout := g.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ans, err := jsonhttp.Post(ctx, jsonhttp.Call{
		Client: g.Client, URL: g.URL, Token: g.Token, MaxResponse: maxBulkResponse,
		What: fmt.Sprintf("bulkRegister session %d", req.SessionID),
		Body: struct {
			SessionID   int64  `json:"sessionId"`
			Role        string `json:"role,omitempty"`
			BatchSize   int    `json:"batchSize,omitempty"`
			ActorUserID int64  `json:"actorUserId,omitempty"`
		}{req.SessionID, req.Role, req.BatchSize, actorUserID},
	})
	if err != nil {
		return BulkResult{}, err
	}
	var out struct {
		JobID *string `json:"jobId"`
		Total *int    `json:"total"`
	}
	if err := json.Unmarshal(ans.Body, &out); err != nil || out.JobID == nil || out.Total == nil {
		if err == nil {
			err = errors.New(`want {"jobId": string, "total": number}`)
		}
		return BulkResult{}, failure.Permanentf("bulkRegister session %d: %s with a body that is not its result (%v): %s", req.SessionID, ans.Status, err, jsonhttp.Snippet(ans.Body))
	}
	return BulkResult{JobID: *out.JobID, Total: *out.Total}, nil
}
