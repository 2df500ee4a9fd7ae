package sqs_test

import (
	"slices"
	"sync"

	"github.com/ThreeDotsLabs/watermill"
)

// syncLogs captures log lines like watermill.CaptureLoggerAdapter, but lines
// returns a copy under its lock: the adapter's Captured hands out the map the
// subscription's goroutines keep appending to (a data race while they run).
type syncLogs struct {
	mu     *sync.Mutex
	lines  *map[watermill.LogLevel][]watermill.CapturedMessage
	fields watermill.LogFields
}

func newSyncLogs() syncLogs {
	m := map[watermill.LogLevel][]watermill.CapturedMessage{}
	return syncLogs{mu: &sync.Mutex{}, lines: &m}
}

func (l syncLogs) capture(level watermill.LogLevel, msg string, err error, fields watermill.LogFields) {
	l.mu.Lock()
	defer l.mu.Unlock()
	(*l.lines)[level] = append((*l.lines)[level], watermill.CapturedMessage{Level: level, Msg: msg, Err: err, Fields: l.fields.Copy().Add(fields)})
}

// at returns a copy of the lines logged at level so far.
func (l syncLogs) at(level watermill.LogLevel) []watermill.CapturedMessage {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone((*l.lines)[level])
}

func (l syncLogs) Error(msg string, err error, fields watermill.LogFields) {
	l.capture(watermill.ErrorLogLevel, msg, err, fields)
}
func (l syncLogs) Info(msg string, fields watermill.LogFields) {
	l.capture(watermill.InfoLogLevel, msg, nil, fields)
}
func (l syncLogs) Debug(msg string, fields watermill.LogFields) {
	l.capture(watermill.DebugLogLevel, msg, nil, fields)
}
func (l syncLogs) Trace(msg string, fields watermill.LogFields) {
	l.capture(watermill.TraceLogLevel, msg, nil, fields)
}
func (l syncLogs) With(fields watermill.LogFields) watermill.LoggerAdapter {
	l.fields = l.fields.Copy().Add(fields)
	return l
}
