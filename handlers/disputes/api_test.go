package disputes_test

// The HTTP API against both stores: validation, the idempotency key
// (repeat → the same 201, nothing written twice; another body → 422; racing
// repeats → one row), the flag, and authentication.

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/auth"
	"github.com/eventpipe/eventpipe/app/dbtx/dbtest"
	"github.com/eventpipe/eventpipe/app/outbox"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// apiFixture is the API on one store, and how to count what it wrote.
type apiFixture struct {
	srv   *httptest.Server
	store disputes.Store
	// events counts the outbox rows (Postgres) or published events
	// (memory) of type typ whose body mentions needle.
	events func(t *testing.T, typ, needle string) int
	// disputes counts the dispute rows of txnID.
	disputes func(t *testing.T, txnID string) int
}

func newAPIFixtures(authn disputes.Authenticator) map[string]func(t *testing.T) apiFixture {
	return map[string]func(t *testing.T) apiFixture{
		"memory": func(t *testing.T) apiFixture {
			rec := &recorder{}
			s := disputes.NewMemory(disputes.MemoryOptions{Outbox: outbox.AfterCommit{Publisher: rec}})
			f := apiFixture{store: s, srv: serveAPI(t, s, authn)}
			f.events = func(_ *testing.T, typ, needle string) int {
				n := 0
				for _, m := range rec.sent() {
					env, err := disputes.Decode(m.Payload)
					if err == nil && env.EventType == typ && strings.Contains(string(m.Payload), needle) {
						n++
					}
				}
				return n
			}
			f.disputes = func(t *testing.T, txnID string) int {
				n := 0
				for _, m := range rec.sent() { // one event per committed dispute
					_, ev, err := disputes.DecodeEvent(m.Payload)
					require.NoError(t, err)
					if ev.DisputeRaised != nil && ev.DisputeRaised.TxnID == txnID {
						n++
					}
				}
				return n
			}
			return f
		},
		"postgres": func(t *testing.T) apiFixture {
			pool, schema := dbtest.Schema(t)
			s, err := disputes.NewPostgres(pool, schema, "")
			require.NoError(t, err)
			f := apiFixture{store: s, srv: serveAPI(t, s, authn)}
			f.events = func(t *testing.T, typ, needle string) int {
				return count(t, pool, schema, "outbox", "convert_from(payload, 'UTF8')::jsonb->>'event_type' = $1 AND convert_from(payload, 'UTF8') LIKE '%' || $2 || '%'", typ, needle)
			}
			f.disputes = func(t *testing.T, txnID string) int {
				return count(t, pool, schema, "disputes", "txn_id = $1", txnID)
			}
			return f
		},
	}
}

func serveAPI(t *testing.T, s disputes.Store, authn disputes.Authenticator) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer((&disputes.API{Store: s, Auth: authn}).Handler())
	t.Cleanup(srv.Close)
	return srv
}

type reply struct {
	status int
	header http.Header
	body   string
}

// post sends body to path with the headers (name, value pairs).
func post(t *testing.T, srv *httptest.Server, path, body string, headers ...string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func errorOf(t *testing.T, r reply) string {
	t.Helper()
	assert.Equal(t, "application/json", r.header.Get("Content-Type"))
	var e struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.body), &e), r.body)
	require.NotEmpty(t, e.Error, r.body)
	return e.Error
}

func TestAPI(t *testing.T) {
	t.Parallel()
	for name, newFixture := range newAPIFixtures(nil) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("raise dispute", func(t *testing.T) {
				t.Parallel()
				testRaiseDispute(t, newFixture(t))
			})
			t.Run("racing repeats", func(t *testing.T) {
				t.Parallel()
				testRacingRepeats(t, newFixture(t))
			})
			t.Run("flag transaction", func(t *testing.T) {
				t.Parallel()
				testFlagTransaction(t, newFixture(t))
			})
			t.Run("refused requests", func(t *testing.T) {
				t.Parallel()
				testRefusedRequests(t, newFixture(t))
			})
		})
	}
}

func testRaiseDispute(t *testing.T, f apiFixture) {
	body := `{"txn_id":"txn_api1","reason_code":"failed_but_debited","rail":"UPI","tat_due_at":"2026-11-14T14:44:03.512+05:30"}`
	first := post(t, f.srv, disputes.DisputesPath, body, disputes.IdempotencyKeyHeader, "key-api1",
		"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	assert.Equal(t, "application/json", first.header.Get("Content-Type"))
	assert.Empty(t, first.header.Get(disputes.ReplayedHeader))
	var d disputes.DisputeResponse
	require.NoError(t, json.Unmarshal([]byte(first.body), &d))
	assert.True(t, strings.HasPrefix(d.ID, "dsp_"), d.ID)
	assert.True(t, disputes.IsEventID(d.EventID), d.EventID)
	assert.Equal(t, "txn_api1", d.TxnID)
	assert.Equal(t, disputes.ReasonFailedButDebited, d.ReasonCode)
	assert.Equal(t, "UPI", d.Rail)
	require.NotNil(t, d.TATDueAt)
	assert.Equal(t, "2026-11-14T09:14:03.512Z", *d.TATDueAt, "UTC, milliseconds")
	_, err := time.Parse(time.RFC3339, d.RaisedAt)
	require.NoError(t, err)

	stored, err := f.store.Dispute(context.Background(), d.ID)
	require.NoError(t, err)
	assert.Equal(t, d.EventID, stored.EventID)
	assert.Equal(t, 1, f.events(t, disputes.EventDisputeRaised, d.ID), "its DisputeRaised")
	assert.Equal(t, 1, f.events(t, disputes.EventDisputeRaised, "4bf92f3577b34da6a3ce929d0e0e4736"), "in the request's trace")

	// The same request again — other spacing, key order and zone — is the
	// same request: the first response, nothing written.
	again := post(t, f.srv, disputes.DisputesPath, `{ "rail": "UPI", "tat_due_at": "2026-11-14T09:14:03.512Z",
		"reason_code": "failed_but_debited", "txn_id": "txn_api1" }`, disputes.IdempotencyKeyHeader, "key-api1")
	require.Equal(t, http.StatusCreated, again.status, again.body)
	assert.Equal(t, first.body, again.body, "byte for byte")
	assert.Equal(t, "true", again.header.Get(disputes.ReplayedHeader))
	assert.Equal(t, 1, f.disputes(t, "txn_api1"), "no second row")
	assert.Equal(t, 1, f.events(t, disputes.EventDisputeRaised, "txn_api1"), "no second event")

	// The key with another request: 422, nothing written.
	other := post(t, f.srv, disputes.DisputesPath, `{"txn_id":"txn_api1","reason_code":"duplicate_charge"}`, disputes.IdempotencyKeyHeader, "key-api1")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status)
	assert.Contains(t, errorOf(t, other), "already used with a different request")
	assert.Equal(t, 1, f.disputes(t, "txn_api1"))

	// Another key for the same transaction is another dispute.
	second := post(t, f.srv, disputes.DisputesPath, `{"txn_id":"txn_api1","reason_code":"duplicate_charge","tat_due_at":null}`, disputes.IdempotencyKeyHeader, "key-api2")
	require.Equal(t, http.StatusCreated, second.status, second.body)
	assert.Contains(t, second.body, `"tat_due_at":null`)
	assert.Contains(t, second.body, `"rail":""`)
	assert.Equal(t, 2, f.disputes(t, "txn_api1"))
}

func testRacingRepeats(t *testing.T, f apiFixture) {
	const n = 10
	body := `{"txn_id":"txn_race","reason_code":"credit_not_received"}`
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = post(t, f.srv, disputes.DisputesPath, body, disputes.IdempotencyKeyHeader, "key-race")
		}()
	}
	wg.Wait()
	replayed := 0
	for _, r := range replies {
		require.Equal(t, http.StatusCreated, r.status, r.body)
		assert.Equal(t, replies[0].body, r.body, "every racer gets the one dispute")
		if r.header.Get(disputes.ReplayedHeader) == "true" {
			replayed++
		}
	}
	assert.Equal(t, n-1, replayed)
	assert.Equal(t, 1, f.disputes(t, "txn_race"), "one row")
	assert.Equal(t, 1, f.events(t, disputes.EventDisputeRaised, "txn_race"), "one event")
}

func testFlagTransaction(t *testing.T, f apiFixture) {
	path := strings.Replace(disputes.FlagPath, "{txn_id}", "txn_flag1", 1)
	r := post(t, f.srv, path, `{"risk_score":91.5,"reason":"velocity"}`)
	require.Equal(t, http.StatusCreated, r.status, r.body)
	var fl disputes.FlagResponse
	require.NoError(t, json.Unmarshal([]byte(r.body), &fl))
	assert.Equal(t, "txn_flag1", fl.TxnID)
	assert.InDelta(t, 91.5, fl.RiskScore, 0)
	assert.Equal(t, "velocity", fl.Reason)
	assert.True(t, disputes.IsEventID(fl.EventID))
	r = post(t, f.srv, path, `{"risk_score":91.5,"reason":"velocity"}`)
	require.Equal(t, http.StatusCreated, r.status, "no key: every request is a new flag")
	assert.Equal(t, 2, f.events(t, disputes.EventTransactionFlagged, "txn_flag1"))

	keyed := strings.Replace(disputes.FlagPath, "{txn_id}", "txn_flag2", 1)
	first := post(t, f.srv, keyed, `{"risk_score":12}`, disputes.IdempotencyKeyHeader, "flag-key")
	require.Equal(t, http.StatusCreated, first.status, first.body)
	again := post(t, f.srv, keyed, `{"risk_score":12.0}`, disputes.IdempotencyKeyHeader, "flag-key")
	require.Equal(t, http.StatusCreated, again.status)
	assert.Equal(t, first.body, again.body)
	assert.Equal(t, "true", again.header.Get(disputes.ReplayedHeader))
	assert.Equal(t, 1, f.events(t, disputes.EventTransactionFlagged, "txn_flag2"), "the key is honoured")
	other := post(t, f.srv, keyed, `{"risk_score":13}`, disputes.IdempotencyKeyHeader, "flag-key")
	assert.Equal(t, http.StatusUnprocessableEntity, other.status)
	// A key is bound to its operation: the dispute endpoint refuses it.
	cross := post(t, f.srv, disputes.DisputesPath, `{"txn_id":"txn_flag2","reason_code":"x"}`, disputes.IdempotencyKeyHeader, "flag-key")
	assert.Equal(t, http.StatusUnprocessableEntity, cross.status)
}

func testRefusedRequests(t *testing.T, f apiFixture) {
	key := []string{disputes.IdempotencyKeyHeader, "key-bad"}
	flag := strings.Replace(disputes.FlagPath, "{txn_id}", "txn_bad", 1)
	for _, c := range []struct {
		name, path, body string
		headers          []string
		status           int
		message          string
	}{
		{"no key", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r"}`, nil, 400, "Idempotency-Key header is required"},
		{"empty key", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r"}`, []string{disputes.IdempotencyKeyHeader, ""}, 400, "Idempotency-Key must be 1..255 visible ASCII"},
		{"long key", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r"}`, []string{disputes.IdempotencyKeyHeader, strings.Repeat("k", 256)}, 400, "Idempotency-Key must be 1..255"},
		{"two keys", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r"}`, []string{disputes.IdempotencyKeyHeader, "a", disputes.IdempotencyKeyHeader, "b"}, 400, "one Idempotency-Key header"},
		{"malformed", disputes.DisputesPath, `{"txn_id":`, key, 400, "body is not a JSON object"},
		{"not an object", disputes.DisputesPath, `["txn_id"]`, key, 400, "body is not a JSON object"},
		{"empty body", disputes.DisputesPath, ``, key, 400, "body is not a JSON object"},
		{"missing txn_id", disputes.DisputesPath, `{"reason_code":"r"}`, key, 400, "txn_id is required"},
		{"txn_id a number", disputes.DisputesPath, `{"txn_id":42,"reason_code":"r"}`, key, 400, "txn_id must be a string"},
		{"txn_id too long", disputes.DisputesPath, `{"txn_id":"` + strings.Repeat("t", 129) + `","reason_code":"r"}`, key, 400, "txn_id longer than 128 bytes"},
		{"empty reason_code", disputes.DisputesPath, `{"txn_id":"t","reason_code":""}`, key, 400, "reason_code must not be empty"},
		{"rail null", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r","rail":null}`, key, 400, "rail must be a string"},
		{"tat_due_at no time", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r","tat_due_at":"tomorrow"}`, key, 400, `tat_due_at "tomorrow" is not an RFC 3339 time`},
		{"tat_due_at a number", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r","tat_due_at":1700000000}`, key, 400, "tat_due_at must be a string"},
		{"unknown field", disputes.DisputesPath, `{"txn_id":"t","reason_code":"r","amount":100}`, key, 400, `unknown field "amount"`},
		{"client's id", disputes.DisputesPath, `{"id":"dsp_mine","txn_id":"t","reason_code":"r"}`, key, 400, `unknown field "id"`},
		{"too large", disputes.DisputesPath, `{"txn_id":"t","reason_code":"` + strings.Repeat("r", disputes.MaxRequestBytes) + `"}`, key, 413, "body over 65536 bytes"},
		{"flag without score", flag, `{"reason":"x"}`, nil, 400, "risk_score is required"},
		{"flag score a string", flag, `{"risk_score":"high"}`, nil, 400, "risk_score must be a number"},
		{"flag score out of range", flag, `{"risk_score":101}`, nil, 400, "risk_score 101 is outside 0..100"},
		{"flag txn_id in the body", flag, `{"risk_score":1,"txn_id":"other"}`, nil, 400, `unknown field "txn_id"`},
		{"flag bad key", flag, `{"risk_score":1}`, []string{disputes.IdempotencyKeyHeader, "tab\there"}, 400, "Idempotency-Key must be"},
		{"flag txn_id too long", "/v1/transactions/" + strings.Repeat("t", 129) + "/flag", `{"risk_score":1}`, nil, 400, "txn_id in the path must be 1..128 bytes"},
		{"unknown path", "/v1/refunds", `{}`, nil, 404, "not found"},
	} {
		r := post(t, f.srv, c.path, c.body, c.headers...)
		assert.Equal(t, c.status, r.status, "%s: %s", c.name, r.body)
		assert.Contains(t, errorOf(t, r), c.message, c.name)
	}
	assert.Zero(t, f.disputes(t, "t"), "nothing refused was written")
	assert.Zero(t, f.events(t, disputes.EventTransactionFlagged, "txn_bad"))

	resp, err := f.srv.Client().Get(f.srv.URL + disputes.DisputesPath)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
	assert.Contains(t, string(b), `"error":"use POST"`)
}

// With a verifier every request needs a valid bearer JWT; any roles will
// do (the caller is a service).
func TestAPIAuthentication(t *testing.T) {
	t.Parallel()
	secret := []byte("disputes-api-test-secret-of-32-bytes!")
	v, err := auth.New(auth.Config{Secret: secret})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	f := newAPIFixtures(v)["memory"](t)
	body := `{"txn_id":"txn_auth","reason_code":"r"}`
	key := []string{disputes.IdempotencyKeyHeader, "key-auth"}

	r := post(t, f.srv, disputes.DisputesPath, body, key...)
	assert.Equal(t, http.StatusUnauthorized, r.status)
	assert.Contains(t, errorOf(t, r), "authentication required")
	assert.Equal(t, `Bearer realm="eventpipe"`, r.header.Get("WWW-Authenticate"))

	other, err := auth.MintHS256([]byte("another-secret-entirely-32-bytes-long"), auth.Claims{Subject: "mcp-gateway", IssuedAt: time.Now(), TTL: time.Minute})
	require.NoError(t, err)
	r = post(t, f.srv, disputes.DisputesPath, body, append(key, "Authorization", "Bearer "+other)...)
	assert.Equal(t, http.StatusUnauthorized, r.status)
	assert.Contains(t, errorOf(t, r), "invalid token")
	expired, err := auth.MintHS256(secret, auth.Claims{Subject: "mcp-gateway", IssuedAt: time.Now().Add(-time.Hour), TTL: time.Minute})
	require.NoError(t, err)
	r = post(t, f.srv, disputes.DisputesPath, body, append(key, "Authorization", "Bearer "+expired)...)
	assert.Equal(t, http.StatusUnauthorized, r.status)
	r = post(t, f.srv, "/v1/unknown", body, key...)
	assert.Equal(t, http.StatusUnauthorized, r.status, "authentication before routing: no map of the API for strangers")
	assert.Zero(t, f.disputes(t, "txn_auth"))

	token, err := auth.MintHS256(secret, auth.Claims{Subject: "mcp-gateway", IssuedAt: time.Now(), TTL: time.Minute})
	require.NoError(t, err)
	r = post(t, f.srv, disputes.DisputesPath, body, append(key, "Authorization", "Bearer "+token)...)
	assert.Equal(t, http.StatusCreated, r.status, r.body)
	assert.Equal(t, 1, f.disputes(t, "txn_auth"))
}
