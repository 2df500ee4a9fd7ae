package sqs

import (
	"fmt"
	"strings"
	"sync"
)

// maxQueueName is SQS's limit on a queue name, ".fifo" included.
const maxQueueName = 80

// fifoSuffix ends every FIFO queue's name, on SQS and in the topology.
const fifoSuffix = ".fifo"

// queueNameRule is the rule a *QueueNameError quotes.
const queueNameRule = "SQS queue names are 1 to 80 characters: ASCII letters, digits, '-' and '_', " +
	"and a FIFO queue's ends in .fifo"

// QueueName is the SQS queue name of topic with prefix in front. It does not
// check the result; a PubSub refuses an invalid one with a *QueueNameError.
//
// SQS names a queue with 1 to 80 characters, each an ASCII letter, a digit,
// '-' or '_'; a FIFO queue's name ends in ".fifo", which counts toward the 80.
// The topology files use RabbitMQ names, dots included (StackUp's
// ai.analyze.resume, dlq.core.callback.tts), which the emulator takes and SQS
// refuses. QueueName is the one mapping from a topic (a topology queue name)
// to its SQS queue name, and every path of the adapter goes through it:
// Publish, Subscribe, SubscribeInitialize, Plan, Apply, CreateMissing,
// QueueStats and DeadLetterSources.
//
//  1. A trailing ".fifo" is kept as it is and set aside.
//  2. Every other '.' becomes '-'.
//  3. prefix (a PubSub's Config.QueuePrefix) is put in front.
//
// Nothing else changes: case, '-' and '_' stay, and a character SQS refuses
// is not replaced but refused (a *QueueNameError), on the emulator too. So a
// name that is already valid maps to itself (without a prefix): the
// interviews, disputes, booking and join-link queues keep their names.
//
//	topic                          SQS queue name (prefix "")
//	ai.analyze.resume              ai-analyze-resume
//	ai.analyze.cover_letter        ai-analyze-cover_letter
//	dlq.q.realtime.session.notify  dlq-q-realtime-session-notify
//	booking-session-events.fifo    booking-session-events.fifo
//	a.b.fifo                       a-b.fifo
//	interview-completed-dlq        interview-completed-dlq
//
// The mapping loses the difference between '.' and '-' (a.b and a-b both map
// to a-b), so it is never inverted: a queue name is mapped back to its topic
// by looking it up among the topics the PubSub knows, Config.Topics and every
// topic it has mapped since. Two known topics mapping to one queue name are
// refused: New refuses them in Config.Topics, Plan and Apply in a topology,
// and Publish and Subscribe a topic whose queue name another topic has.
func QueueName(prefix, topic string) string {
	base, fifo := strings.CutSuffix(topic, fifoSuffix)
	name := prefix + strings.ReplaceAll(base, ".", "-")
	if fifo {
		name += fifoSuffix
	}
	return name
}

// QueueNameError is returned for a topic whose SQS queue name SQS would
// refuse, or that another topic already has. It is a broker.Refusal:
// publishing to the topic again cannot succeed.
type QueueNameError struct {
	// Topic is the name the caller used; Queue is QueueName's result.
	Topic string
	Queue string
	// Reason says what is wrong with Queue.
	Reason string
}

// Error names the topic, its queue name and the rule it breaks.
func (e *QueueNameError) Error() string {
	return fmt.Sprintf("sqs: topic %q maps to queue name %q: %s", e.Topic, e.Queue, e.Reason)
}

// Refused makes the error a broker.Refusal.
func (e *QueueNameError) Refused() bool { return true }

// checkQueueName returns why SQS would refuse name, or "" when it would not.
func checkQueueName(name string) string {
	base, _ := strings.CutSuffix(name, fifoSuffix)
	switch {
	case base == "":
		return "empty; " + queueNameRule
	case len(name) > maxQueueName:
		return fmt.Sprintf("%d characters, more than %d; %s", len(name), maxQueueName, queueNameRule)
	}
	for _, r := range base {
		if !validNameChar(r) {
			return fmt.Sprintf("character %q is not allowed; %s", r, queueNameRule)
		}
	}
	return ""
}

func validNameChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_'
}

// checkPrefix returns why prefix cannot begin SQS queue names, or "".
func checkPrefix(prefix string) string {
	for _, r := range prefix {
		if !validNameChar(r) {
			return fmt.Sprintf("character %q is not allowed: a prefix is ASCII letters, digits, '-' and '_'", r)
		}
	}
	if len(prefix) >= maxQueueName {
		return fmt.Sprintf("%d characters leave no room in a queue name of at most %d", len(prefix), maxQueueName)
	}
	return ""
}

// checkTopics returns a *QueueNameError for every topic whose queue name is
// invalid or is another topic's too.
func checkTopics(prefix string, topics []string) []error {
	var errs []error
	owner := map[string]string{}
	for _, topic := range topics {
		name := QueueName(prefix, topic)
		if reason := checkQueueName(name); reason != "" {
			errs = append(errs, &QueueNameError{Topic: topic, Queue: name, Reason: reason})
			continue
		}
		if other, ok := owner[name]; ok && other != topic {
			errs = append(errs, collision(topic, name, other))
			continue
		}
		owner[name] = topic
	}
	return errs
}

func collision(topic, name, other string) *QueueNameError {
	return &QueueNameError{Topic: topic, Queue: name, Reason: fmt.Sprintf(
		"topic %q maps to the same queue: rename one of them (QueueName turns '.' into '-')", other)}
}

// queueNames is a PubSub's mapping: QueueName with its prefix, and the
// topics it knows by queue name, to map names back exactly.
type queueNames struct {
	prefix string

	mu      sync.Mutex
	topicOf map[string]string // queue name → topic
}

func newQueueNames(prefix string, topics []string) *queueNames {
	n := &queueNames{prefix: prefix, topicOf: make(map[string]string, len(topics))}
	for _, t := range topics { // checked by Config.Validate
		n.topicOf[QueueName(prefix, t)] = t
	}
	return n
}

// queue returns topic's queue name and remembers the topic, or a
// *QueueNameError when the name is invalid or another topic's.
func (n *queueNames) queue(topic string) (string, error) {
	name := QueueName(n.prefix, topic)
	if reason := checkQueueName(name); reason != "" {
		return "", &QueueNameError{Topic: topic, Queue: name, Reason: reason}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if other, ok := n.topicOf[name]; ok && other != topic {
		return "", collision(topic, name, other)
	}
	n.topicOf[name] = topic
	return name, nil
}

// queues maps every topic of a set that must be collision-free (a
// topology's queues), before any of them is remembered: the errors of all
// of them, joined, or each topic's queue name.
func (n *queueNames) queues(topics []string) (map[string]string, []error) {
	if errs := checkTopics(n.prefix, topics); len(errs) > 0 {
		return nil, errs
	}
	out := make(map[string]string, len(topics))
	var errs []error
	for _, t := range topics {
		name, err := n.queue(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[t] = name
	}
	return out, errs
}

// topic returns the known topic whose queue name is name.
func (n *queueNames) topic(name string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t, ok := n.topicOf[name]
	return t, ok
}

// topicOrName maps a queue name found on SQS (a dead-letter source) back to
// a topic: the known topic, else — for a queue this PubSub never named — the
// name without the prefix, which maps to name again when it holds no dot (a
// valid name holds none before .fifo). A queue outside the prefix has no
// topic: ok is false.
func (n *queueNames) topicOrName(name string) (string, bool) {
	if t, ok := n.topic(name); ok {
		return t, true
	}
	rest, ok := strings.CutPrefix(name, n.prefix)
	if !ok || rest == "" || QueueName(n.prefix, rest) != name {
		return "", false
	}
	return rest, true
}

// TopicOf returns the topic whose SQS queue name is queue, among the topics
// the PubSub knows (Config.Topics, and every topic it has mapped since): the
// exact inverse of QueueName, which a function of the name alone cannot be.
// The CLI uses it to take an SQS queue name where a topology name is asked.
func (p *PubSub) TopicOf(queue string) (string, bool) { return p.names.topic(queue) }

// QueueName returns the SQS queue name of topic on this PubSub (QueueName
// with Config.QueuePrefix), or a *QueueNameError.
func (p *PubSub) QueueName(topic string) (string, error) { return p.names.queue(topic) }
