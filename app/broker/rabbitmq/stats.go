package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/eventpipe/eventpipe/app/broker"
)

var _ broker.QueueStatter = (*PubSub)(nil)

// managementTimeout bounds one request to the management API (ctx may
// shorten it): an API that does not answer makes the in-flight count
// unknown, it does not hold the caller.
const managementTimeout = 5 * time.Second

// QueueStats counts the messages of the queue named queue in this PubSub's
// vhost.
//
// Ready comes from a passive queue declare on the consume connection: exact,
// and the proof that the queue exists (a queue that does not is an error
// wrapping broker.ErrQueueNotFound). AMQP has no count of the messages
// delivered and not yet acknowledged; only the management HTTP API has one
// (GET /api/queues/{vhost}/{name}: messages_unacknowledged), read at
// Config.ManagementURL. Its figures are RabbitMQ's statistics, collected
// every few seconds (collect_statistics_interval, 5 s by default), so
// InFlight is estimated from them and the exact ready count as the larger
// of the unacknowledged messages then and the messages then minus those
// ready now: while nobody publishes, that is never below the truth (a
// message delivered since the statistics were collected still counts), so a
// drain gate cannot pass on stale figures; it may run high for a few seconds.
//
// When the management API is not reachable, refuses the credentials, or has
// no statistics for the queue yet, InFlightKnown is false and Note says why:
// the stats are then never Empty. Delayed is 0 (RabbitMQ delays nothing
// without a plugin), and OldestAge is 0 (not reported).
func (p *PubSub) QueueStats(ctx context.Context, queue string) (broker.QueueStats, error) {
	ready, consumers, err := p.readyMessages(queue)
	if err != nil {
		return broker.QueueStats{}, err
	}
	s := broker.QueueStats{Queue: queue, Ready: ready}
	m, err := p.managementQueue(ctx, queue)
	if err != nil {
		s.Note = fmt.Sprintf("in flight unknown (consumers attached: %d): %v", consumers, err)
		return s, nil
	}
	s.InFlight = max(m.unacked, m.ready+m.unacked-ready, 0)
	s.InFlightKnown = true
	return s, nil
}

// readyMessages passively declares queue on a channel of its own.
func (p *PubSub) readyMessages(queue string) (ready int64, consumers int, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return 0, 0, fmt.Errorf("queue stats of %s: %w", queue, ErrClosed)
	}
	ch, err := p.subConn.channel()
	if err != nil {
		return 0, 0, fmt.Errorf("queue stats of %s: %w", queue, err)
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return 0, 0, fmt.Errorf("rabbitmq: queue stats of %s: %w: %s", queue, broker.ErrQueueNotFound, amqpErr.Reason)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("rabbitmq: queue stats of %s: %w", queue, err)
	}
	return int64(q.Messages), q.Consumers, nil
}

// managementCounts is what the management API says of a queue.
type managementCounts struct{ ready, unacked int64 }

// managementQueue reads queue's message counts from the management API.
func (p *PubSub) managementQueue(ctx context.Context, queue string) (managementCounts, error) {
	body, err := p.management(ctx, http.MethodGet, "/api/queues/%s/%s?columns=messages_ready,messages_unacknowledged", queue, nil)
	if err != nil {
		return managementCounts{}, err
	}
	where := "management API at " + redactURL(p.cfg.ManagementURL)
	var q struct {
		Ready   *int64 `json:"messages_ready"`
		Unacked *int64 `json:"messages_unacknowledged"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return managementCounts{}, fmt.Errorf("%s: queue %s: %w", where, queue, err)
	}
	if q.Ready == nil || q.Unacked == nil {
		return managementCounts{}, fmt.Errorf("%s: no message counts for queue %s yet", where, queue)
	}
	return managementCounts{ready: *q.Ready, unacked: *q.Unacked}, nil
}

// errManagementNotFound is returned by management for a 404: no such queue
// (or no statistics for it yet).
var errManagementNotFound = errors.New("not found")

// management sends one request to the management API: path is a format
// with two %s, filled with the vhost and queue (path-escaped); body, when not
// nil, is sent as JSON. It returns the body of a 200 answer.
func (p *PubSub) management(ctx context.Context, method, path, queue string, body []byte) ([]byte, error) {
	if p.cfg.ManagementURL == "" {
		return nil, errors.New("no management URL")
	}
	uri, err := amqp.ParseURI(p.cfg.URL)
	if err != nil {
		return nil, err
	}
	base, err := url.Parse(p.cfg.ManagementURL)
	if err != nil {
		return nil, fmt.Errorf("management url: %w", err)
	}
	user, password := uri.Username, uri.Password
	if base.User != nil {
		user = base.User.Username()
		password, _ = base.User.Password()
		base.User = nil
	}
	endpoint := strings.TrimSuffix(base.String(), "/") + fmt.Sprintf(path, url.PathEscape(uri.Vhost), url.PathEscape(queue))

	ctx, cancel := context.WithTimeout(ctx, managementTimeout)
	defer cancel()
	var reqBody io.Reader
	if body != nil {
		reqBody = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint, reqBody)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.SetBasicAuth(user, password)
	where := "management API at " + redactURL(p.cfg.ManagementURL)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	defer func() { _ = resp.Body.Close() }()
	// A get of many dead letters of up to 1 MiB each: read what came.
	got, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return got, nil
	case http.StatusNotFound:
		return nil, fmt.Errorf("%s: no queue %s (or no statistics for it yet): %w", where, queue, errManagementNotFound)
	default:
		return nil, fmt.Errorf("%s: %s: %s", where, resp.Status, strings.TrimSpace(string(got)))
	}
}

// defaultManagementURL is the management API on amqpURL's host and the
// plugin's default port; "" when amqpURL does not parse (Validate says so).
func defaultManagementURL(amqpURL string) string {
	uri, err := amqp.ParseURI(amqpURL)
	if err != nil {
		return ""
	}
	if uri.Scheme == "amqps" {
		return "https://" + net.JoinHostPort(uri.Host, strconv.Itoa(15671))
	}
	return "http://" + net.JoinHostPort(uri.Host, strconv.Itoa(15672))
}

func validManagementURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%s: want an http or https URL", redactURL(raw))
	}
	if u.Host == "" {
		return fmt.Errorf("%s: no host", redactURL(raw))
	}
	return nil
}
