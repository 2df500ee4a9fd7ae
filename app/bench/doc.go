// Package bench measures eventpipe side by side with the raw clients it is
// built on: RabbitMQ publish, consume and end to end against amqp091-go, the
// outbox relay against a hand-written batched relay and against the rate one
// writer can INSERT, the inbox against the same handler without dedupe, SQS
// API calls per message against watermill-aws's defaults, and the Postgres
// and memory brokers against raw pgx and Watermill's GoChannel. The SC rows
// show how cost grows: throughput and idle cost (goroutines, heap, SQS empty
// receives) with 1, 15 and 100 queues on one instance, and serve's start-up
// with all five specs; ./scaleplot draws their throughput as a PNG.
//
// Everything lives in the package's tests. `make bench` runs TestBenchTable
// with EVENTPIPE_BENCH=1: every pair runs in one process, the two sides of a
// pair alternating repetition by repetition (ABAB…, the order flipped every
// other repetition) with the queue purged before each, and one table of
// medians and ratios is printed. BENCH_QUICK=1 runs fewer, smaller
// repetitions. Without EVENTPIPE_BENCH the same test runs a tiny smoke pass
// that checks every scenario still works. The same scenarios are plain
// benchmarks too:
//
//	go test -run '^$' -bench . ./app/bench
package bench
