package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/eventpipe/eventpipe/app/broker/sqs"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// How cost grows with the number of queues one instance consumes (issue 18,
// item 4): the SC rows.

// queueCounts are the queue counts of the SC rows: one queue, 15 (the most
// one spec consumes: stackup's request and callback queues) and 100. The
// smoke pass checks the scenarios on 2.
func (m mode) queueCounts() []int {
	if m.name == smokeMode.name {
		return []int{2}
	}
	return []int{1, 15, 100}
}

// settle is how long subscriptions run idle before their cost is read: long
// enough for every receive loop, poller and heartbeat to have started.
func (m mode) settle() time.Duration {
	switch m.name {
	case fullMode.name:
		return 2 * time.Second
	case quickMode.name:
		return 300 * time.Millisecond
	}
	return 50 * time.Millisecond
}

// pollWindow is how long the idle SQS long polls are counted: a minute in
// the full run, one 20-second long poll in the quick pass (extrapolated to a
// minute), a moment in the smoke pass (which measures nothing).
func (m mode) pollWindow() time.Duration {
	switch m.name {
	case fullMode.name:
		return time.Minute
	case quickMode.name:
		return 20 * time.Second
	}
	return 200 * time.Millisecond
}

// scalePairs: SC, on RabbitMQ, Postgres and SQS, then the idle SQS long
// polls and serve's start-up. The idle polls' subscriptions take up to a
// long poll (20 s) to close, which they do in the background while serve
// starts in processes of its own: goroutines ending meanwhile would skew
// the idle cost read in this process.
func scalePairs(tb testing.TB, m mode, rabbit, pg, sq *env) []pair {
	var out []pair
	for _, b := range []struct {
		e        *env
		full     int
		settings string
	}{
		{rabbit, 10000, rabbitSettings},
		{pg, 5000, postgresSettings},
		{sq, 2000, sqsSettings},
	} {
		for _, q := range m.queueCounts() {
			out = append(out, b.e.scalePair(tb, m, m.n(b.full), q, 256, b.settings))
		}
	}
	return append(out, sqsIdlePolls(m), startupPair(m))
}

// queuesName is "1 queue", "15 queues".
func queuesName(n int) string {
	if n == 1 {
		return "1 queue"
	}
	return fmt.Sprintf("%d queues", n)
}

// footprint is the process's goroutines and live heap.
type footprint struct {
	goroutines int
	heap       int64
}

// measureFootprint collects garbage and reads the goroutines and the live
// heap (HeapAlloc right after a GC). Two collections: what sync.Pools hold
// survives the first in their victim caches.
func measureFootprint() footprint {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return footprint{goroutines: runtime.NumGoroutine(), heap: int64(ms.HeapAlloc)}
}

// scalePair: n messages spread evenly over queues queues (n/queues each,
// rounded down), consumed by one instance that subscribed them all —
// eventpipe one router with a route per queue, the baseline one consumer per
// queue. Each repetition subscribes, lets the subscriptions idle for
// m.settle(), reads what they cost (goroutines and live heap above the
// process's before it subscribed: the idle-cost row), then publishes from 4
// goroutines, 10 per call, the queues taken in turn, and times the first
// publish to the last message handled (the throughput row).
func (e *env) scalePair(tb testing.TB, m mode, n, queues, size int, settings string) pair {
	per := max(n/queues, 1)
	n = per * queues
	newTopics := func(tb testing.TB) []string {
		topics := make([]string, queues)
		for i := range topics {
			topics[i] = e.topic(tb)
		}
		return topics
	}
	var topics []string
	if !e.freshTopics {
		topics = newTopics(tb)
	}
	scenario := fmt.Sprintf("%s end to end, %s", e.kind, queuesName(queues))
	p := pair{id: "SC", scenario: scenario, kind: throughput,
		idleScenario: fmt.Sprintf("%s idle cost, %s subscribed", e.kind, queuesName(queues)),
		settings: fmt.Sprintf("body=%s queues=%d n=%d (%d per queue) publishers=4 batch=10 %s, eventpipe one router of %d routes, idle cost read after %s",
			sizeName(size), queues, n, per, settings, queues, m.settle())}
	for i := range 2 {
		pp, name := e.sidePipe(i), e.sideName(i)
		p.sides = append(p.sides, side{name: name, run: func(tb testing.TB) Sample {
			topics := topics
			if e.freshTopics {
				topics = newTopics(tb)
			}
			for _, t := range topics {
				e.purge(tb, t)
			}
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			cnt := newCounter(n)
			before := measureFootprint()
			stop := consumeAll(tb, pp, topics, cnt.handle)
			time.Sleep(m.settle())
			idle := measureFootprint()
			start := time.Now()
			if err := publishSpread(ctx, pp, topics, per, 4, 10, size); err != nil {
				stop()
				tb.Fatalf("%s publish: %v", name, err)
			}
			cnt.wait(tb, scenario+" "+name, runTimeout)
			el := time.Since(start)
			stop()
			return Sample{Messages: n, Elapsed: el, Queues: queues,
				Goroutines: idle.goroutines - before.goroutines, HeapBytes: idle.heap - before.heap}
		}})
	}
	return p
}

// publishSpread publishes per messages of size bytes to each of topics from
// workers goroutines, batch per call, the topics taken in turn (a call for
// each topic, then the next round), so that every queue has traffic
// throughout.
func publishSpread(ctx context.Context, p pipe, topics []string, per, workers, batch, size int) error {
	type job struct {
		topic string
		n     int
	}
	var jobs []job
	for sent := 0; sent < per; sent += batch {
		for _, t := range topics {
			jobs = append(jobs, job{t, min(batch, per-sent)})
		}
	}
	var next atomic.Int64
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= len(jobs) || ctx.Err() != nil {
					return
				}
				bodies := make([][]byte, jobs[k].n)
				for i := range bodies {
					bodies[i] = stampedBody(size)
				}
				if err := p.publish(ctx, jobs[k].topic, bodies); err != nil {
					errs[w] = fmt.Errorf("%s: %w", jobs[k].topic, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sqsLongPoll is SQS's longest long poll, the default of eventpipe's SQS
// broker and of watermill-aws.
const sqsLongPoll = 20 * time.Second

// sqsIdlePolls counts the ReceiveMessage calls of idle subscriptions with
// both sides' defaults (20 s long poll; eventpipe 2 receive loops per
// subscription, watermill-aws one): for each queue count, a fresh eventpipe
// broker with a router of that many routes and a fresh watermill-aws
// subscriber on as many queues of their own, every set counted by its own
// client wrapper, all idle at once over one window (the count is of a timer,
// not of a race, and one window for all keeps the pass short). The figure is
// calls per minute per queue.
func sqsIdlePolls(m mode) pair {
	counts, window := m.queueCounts(), m.pollWindow()
	// The smoke pass polls for a second: ending a subscription lets its
	// poll under way finish, which it should not wait 20 s for.
	longPoll := sqsLongPoll
	if m.name == smokeMode.name {
		longPoll = time.Second
	}
	settings := fmt.Sprintf("long poll %s (eventpipe receivers=2), defaults otherwise, all sets idle at once, counted over %s", longPoll, window)
	if window < time.Minute {
		settings += " and extrapolated to a minute"
	}
	return pair{id: "SC", scenario: "sqs idle receives", settings: settings, measure: func(tb testing.TB) []Row {
		admin := sqsAdminClient(tb)
		type set struct {
			queues         int
			ours, base     atomic.Int64 // ReceiveMessage calls so far
			oursAt, baseAt int64        // at the start of the window
			stopOurs       func()
			closeOurs      func() error
			stopBase       func()
		}
		sets := make([]*set, len(counts))
		for i, q := range counts {
			s := &set{queues: q}
			sets[i] = s
			ps, err := sqs.New(context.Background(), sqs.Config{
				Region:        testenv.SQSRegion,
				Endpoint:      testenv.SQSEndpoint(tb),
				Credentials:   credentials.NewStaticCredentialsProvider("test", "test", ""),
				CreateQueues:  true,
				WaitTime:      longPoll,
				ClientOptions: []func(*awssqs.Options){countOp(&s.ours, "ReceiveMessage")},
			}, watermill.NopLogger{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = ps.Close() })
			sub, err := wsqs.NewSubscriber(wsqs.SubscriberConfig{AWSConfig: sqsAWSConfig(tb), OptFns: []func(*awssqs.Options){countOp(&s.base, "ReceiveMessage")}}, watermill.NopLogger{})
			if err != nil {
				tb.Fatal(err)
			}
			tb.Cleanup(func() { _ = sub.Close() })
			oursTopics, baseTopics := idleQueues(tb, admin, ps, q), idleQueues(tb, admin, sub, q)
			s.stopOurs, s.closeOurs = eventpipePipe{ps}.consumeAll(tb, oursTopics, func([]byte) {}), ps.Close
			s.stopBase = consumeAll(tb, watermillPipe{sub: sub}, baseTopics, func([]byte) {})
		}
		time.Sleep(m.settle())
		for _, s := range sets {
			s.oursAt, s.baseAt = s.ours.Load(), s.base.Load()
		}
		time.Sleep(window)
		var rows []Row
		for _, s := range sets {
			perMin := func(calls int64) float64 { return float64(calls) / window.Minutes() }
			ours, base := perMin(s.ours.Load()-s.oursAt), perMin(s.base.Load()-s.baseAt)
			q := float64(s.queues)
			rows = append(rows, Row{ID: "SC", Scenario: fmt.Sprintf("sqs idle receives, %s subscribed", queuesName(s.queues)), Settings: settings,
				Ours:     fmt.Sprintf("%.1f receives/min/queue (%.0f/min)", ours/q, ours),
				Baseline: fmt.Sprintf("%.1f receives/min/queue (%.0f/min) (watermill-aws defaults)", base/q, base),
				Ratio:    ratio(ours, base),
			})
		}
		// Ending a subscription lets its poll under way finish (up to 20 s):
		// done in the background, waited for when the test ends.
		var wg sync.WaitGroup
		for _, s := range sets {
			wg.Go(func() {
				s.stopOurs()
				_ = s.closeOurs()
			})
			wg.Go(s.stopBase)
		}
		tb.Cleanup(wg.Wait)
		return rows
	}}
}

// idleQueues creates n queues of their own through sub's SubscribeInitialize
// (both SQS clients create a queue they subscribe to), deleted when the test
// ends.
func idleQueues(tb testing.TB, admin *awssqs.Client, sub any, n int) []string {
	tb.Helper()
	topics := make([]string, n)
	for i := range topics {
		topics[i] = "bench_idle_" + strings.ToLower(watermill.NewShortUUID())
		initialize(tb, sub, topics[i])
		out, err := admin.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(topics[i])})
		if err != nil {
			tb.Fatalf("queue url %s: %v", topics[i], err)
		}
		tb.Cleanup(func() {
			_, _ = admin.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
		})
	}
	return topics
}
