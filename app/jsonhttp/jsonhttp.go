// Package jsonhttp is the one way eventpipe calls a peer's JSON-over-HTTP
// endpoint from a handler (join-link's bulkRegister, the disputes reversal
// service): a POST of a JSON body with a bearer token, the answer read up to
// a limit, and the outcome classified the way the failure policy reads it —
// a transport error or a retryable status is transient (with the peer's
// Retry-After), any other non-2xx answer is permanent.
package jsonhttp

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

// Call is one POST.
type Call struct {
	// Client sends the request; http.DefaultClient when nil.
	Client *http.Client
	URL    string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Header holds further request headers (an idempotency key).
	Header http.Header
	// Body is marshalled as the request's JSON body.
	Body any
	// MaxResponse bounds how much of the answer is read.
	MaxResponse int64
	// What names the call in errors ("bulkRegister session 7").
	What string
	// Retryable reports whether a non-2xx status is worth retrying;
	// Retryable408429And5xx when nil.
	Retryable func(status int) bool
}

// Retryable408429And5xx is the default retry rule: 408, 429 and every 5xx.
func Retryable408429And5xx(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// Answer is a 2xx answer.
type Answer struct {
	Status string
	Body   []byte
}

// Post sends c. It returns the answer of a 2xx status; otherwise an error
// classified for the failure policy: failure.Permanent for a body that
// cannot be sent or a status c.Retryable refuses, transient (with the
// peer's Retry-After in whole seconds, when it sends one) for a transport
// error or a retryable status.
func Post(ctx context.Context, c Call) (Answer, error) {
	body, err := json.Marshal(c.Body)
	if err != nil {
		return Answer{}, failure.AsPermanent(fmt.Errorf("%s: %w", c.What, err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return Answer{}, failure.AsPermanent(fmt.Errorf("%s: %w", c.What, err))
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("%s: %w", c.What, err) // transient
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxResponse))
	if err != nil {
		return Answer{}, fmt.Errorf("%s: read the response: %w", c.What, err)
	}
	code := resp.StatusCode
	if code == http.StatusOK || code == http.StatusCreated || code == http.StatusAccepted {
		return Answer{Status: resp.Status, Body: data}, nil
	}
	retryable := c.Retryable
	if retryable == nil {
		retryable = Retryable408429And5xx
	}
	if !retryable(code) {
		return Answer{}, failure.Permanentf("%s: %s: %s", c.What, resp.Status, Snippet(data))
	}
	err = fmt.Errorf("%s: %s: %s", c.What, resp.Status, Snippet(data))
	if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil && s > 0 {
		return Answer{}, failure.AsTransient(err, time.Duration(s)*time.Second)
	}
	return Answer{}, err
}

// Snippet is the start of a response body, for an error message.
func Snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
