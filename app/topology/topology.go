// Package topology is the broker-neutral description of a spec's messaging
// objects — exchanges, queues with their dead-letter queues, and bindings with
// routing-key patterns — as pure data with validation and routing, no I/O.
// One YAML file per spec lives under config/topology/; the broker packages
// compile a Topology to their native objects (RabbitMQ exchanges, queues,
// arguments and bindings; SQS queues, redrive policies and attributes).
package topology

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Topology is one spec's messaging objects.
type Topology struct {
	// Name identifies the spec (e.g. "stackup").
	Name string `yaml:"name"`
	// Exchanges route published messages to queues by routing key. Brokers
	// without exchanges (SQS) route with the same rules in the publisher.
	Exchanges []Exchange `yaml:"exchanges"`
	// Queues hold messages for consumers.
	Queues []Queue `yaml:"queues"`
	// Bindings connect exchanges to queues.
	Bindings []Binding `yaml:"bindings"`
}

// Exchange kinds.
const (
	Topic  = "topic"
	Direct = "direct"
	Fanout = "fanout"
)

// Exchange routes messages to the queues bound to it.
type Exchange struct {
	Name string `yaml:"name"`
	// Type is topic (patterns with * and #), direct (exact key) or fanout
	// (every bound queue).
	Type string `yaml:"type"`
}

// Queue kinds on RabbitMQ; SQS has one kind.
const (
	Classic = "classic"
	Quorum  = "quorum"
)

// Queue is a durable queue and its dead-letter queue.
type Queue struct {
	Name string `yaml:"name"`
	// Type is classic (default) or quorum, for RabbitMQ.
	Type string `yaml:"type,omitempty"`
	// FIFO orders messages per group and deduplicates by id (SQS FIFO; the
	// name must end in .fifo). On RabbitMQ: a single-active-consumer queue.
	FIFO bool `yaml:"fifo,omitempty"`
	// ContentBasedDedup lets SQS derive the dedup id from the body (FIFO only).
	ContentBasedDedup bool `yaml:"content_based_dedup,omitempty"`
	// VisibilityTimeout is how long a received message stays hidden from
	// other consumers (SQS) — the handler's time budget on every broker.
	VisibilityTimeout time.Duration `yaml:"visibility_timeout,omitempty"`
	// Retention is how long an unconsumed message is kept (SQS
	// MessageRetentionPeriod; RabbitMQ x-message-ttl when set).
	Retention time.Duration `yaml:"retention,omitempty"`
	// ReceiveWait is the long-poll time of a receive (SQS).
	ReceiveWait time.Duration `yaml:"receive_wait,omitempty"`
	// DeliveryDelay holds every new message back this long (SQS DelaySeconds).
	DeliveryDelay time.Duration `yaml:"delivery_delay,omitempty"`
	// Encryption is "sse-sqs" (SQS-managed server-side encryption) or ""
	// (not managed: the queue keeps what it has, so a key missing from a file
	// never turns encryption off on a live queue).
	Encryption string `yaml:"encryption,omitempty"`
	// BatchSize is how many messages a consumer takes at once: SQS receive
	// batch size, RabbitMQ prefetch.
	BatchSize int `yaml:"batch_size,omitempty"`
	// MaxReceives is how many times a message is delivered before it goes to
	// the dead-letter queue: SQS maxReceiveCount, RabbitMQ quorum
	// x-delivery-limit. 0 = no limit.
	MaxReceives int `yaml:"max_receives,omitempty"`
	// DeadLetter, when set, declares the queue's dead-letter queue.
	DeadLetter *DeadLetter `yaml:"dead_letter,omitempty"`
	// Policy, when set, overrides what eventpipe's consumers of the queue do
	// on failure (the route's policy, route.Policy); unset keys keep the
	// route's own values, which follow its spec.
	Policy *Policy `yaml:"policy,omitempty"`
	// S3Notifications, when set, lets Amazon S3 send a bucket's event
	// notifications to the queue: on SQS, a statement in the queue's access
	// policy allowing s3.amazonaws.com to sqs:SendMessage from that bucket
	// only. Other brokers ignore it (S3 delivers only to SQS).
	S3Notifications *S3Notifications `yaml:"s3_notifications,omitempty"`
}

// S3Notifications names the S3 bucket whose event notifications a queue
// receives.
type S3Notifications struct {
	// From is the configuration key holding the bucket's name (e.g.
	// disputes.s3_bucket): a spec's topology file cannot know a deployment's
	// bucket, so it names the setting, and the deployment fills Bucket and
	// SourceAccount (WithS3Buckets, called by app.DeployedTopology).
	From string `yaml:"from,omitempty"`
	// Bucket is the bucket's name. Empty (From names a setting that is not
	// set): the queue's access policy is left as it is.
	Bucket string `yaml:"bucket,omitempty"`
	// SourceAccount is the id of the AWS account that owns the bucket,
	// required of the sender (aws:SourceAccount) when set.
	SourceAccount string `yaml:"source_account,omitempty"`
}

// Redelivery modes and permanent-failure outcomes a Policy accepts (see
// route.Policy for their meaning).
const (
	InProcess    = "in-process"
	Broker       = "broker"
	Drop         = "drop"
	DeadLetterIt = "dead-letter"
	FailUntilMax = "fail-until-max"
)

// Policy is a queue's consumer failure policy as configured; every field is
// optional.
type Policy struct {
	// MaxAttempts is how many attempts in all before dead-lettering. With
	// broker redelivery it must not exceed max_receives, or the broker would
	// dead-letter first, without a reason.
	MaxAttempts int `yaml:"max_attempts,omitempty"`
	// Redelivery is in-process or broker.
	Redelivery string `yaml:"redelivery,omitempty"`
	// OnPermanent is drop, dead-letter or fail-until-max.
	OnPermanent string `yaml:"on_permanent,omitempty"`
	// Backoff is the wait between attempts.
	Backoff *Backoff `yaml:"backoff,omitempty"`
}

// Backoff is the wait between attempts: initial, then multiplier times longer
// each time up to max, spread by ±jitter (a fraction).
type Backoff struct {
	Initial    time.Duration `yaml:"initial,omitempty"`
	Multiplier float64       `yaml:"multiplier,omitempty"`
	Max        time.Duration `yaml:"max,omitempty"`
	Jitter     float64       `yaml:"jitter,omitempty"`
}

// DeadLetter is where a queue's failed messages go.
type DeadLetter struct {
	// Queue is the dead-letter queue's name; it is declared with its source.
	Queue string `yaml:"queue"`
	// Exchange is the RabbitMQ dead-letter exchange (x-dead-letter-exchange);
	// "" = the default exchange, routing straight to Queue.
	Exchange string `yaml:"exchange,omitempty"`
	// RoutingKey is x-dead-letter-routing-key; the DLQ is bound to Exchange
	// with it. Default: the DLQ's name.
	RoutingKey string `yaml:"routing_key,omitempty"`
	// Retention is how long dead letters are kept.
	Retention time.Duration `yaml:"retention,omitempty"`
}

// Binding routes messages published to Exchange whose routing key matches
// Pattern to Queue.
type Binding struct {
	Exchange string `yaml:"exchange"`
	Queue    string `yaml:"queue"`
	// Pattern is a routing key; on topic exchanges '*' matches one word and
	// '#' zero or more.
	Pattern string `yaml:"routing_key"`
}

// Load reads and validates a topology file. Unknown keys are errors.
func Load(path string) (Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Topology{}, fmt.Errorf("read topology: %w", err)
	}
	return Parse(data)
}

// Parse decodes and validates a topology document.
func Parse(data []byte) (Topology, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var t Topology
	if err := dec.Decode(&t); err != nil {
		return Topology{}, fmt.Errorf("topology: %w", err)
	}
	if err := t.Validate(); err != nil {
		return Topology{}, err
	}
	return t, nil
}

// Merge combines several spec topologies into one named name (e.g. to export
// one RabbitMQ definitions file for a broker that serves them all) and
// validates the result: a name declared by two specs is an error.
func Merge(name string, tops ...Topology) (Topology, error) {
	out := Topology{Name: name}
	for _, t := range tops {
		out.Exchanges = append(out.Exchanges, t.Exchanges...)
		out.Queues = append(out.Queues, t.Queues...)
		out.Bindings = append(out.Bindings, t.Bindings...)
	}
	return out, out.Validate()
}

// AsDeclared is the queue-type override that changes nothing: every queue
// keeps the type its topology file gives it (WithQueueType).
const AsDeclared = "as-declared"

// QueueTypes are the values WithQueueType accepts ("" means AsDeclared).
func QueueTypes() []string { return []string{AsDeclared, Classic, Quorum} }

// WithQueueType returns t with every queue declared of type typ — and so
// every dead-letter queue, which AllQueues gives its source's type — or t
// unchanged for "" and AsDeclared. It is the one place a deployment's choice
// of queue type (rabbitmq.queue_type) is applied, so that serve, `topology
// plan/apply` and `topology export` compile the same queues. Only RabbitMQ
// reads a queue's type; the other brokers ignore it.
func (t Topology) WithQueueType(typ string) (Topology, error) {
	switch typ {
	case "", AsDeclared:
		return t, nil
	case Classic, Quorum:
	default:
		return t, fmt.Errorf("queue type %q is not one of %s", typ, strings.Join(QueueTypes(), ", "))
	}
	out := t
	out.Queues = slices.Clone(t.Queues)
	for i := range out.Queues {
		out.Queues[i].Type = typ
	}
	return out, nil
}

// WithS3Buckets returns t with every queue's S3Notifications.From resolved:
// resolve returns the bucket (and its owner's account, or "") the
// configuration key from holds, "" when it is not set, and an error for a
// key it does not know. It is the one place a deployment's buckets enter a
// topology, so that serve and `topology plan/apply` compile the same access
// policies.
func (t Topology) WithS3Buckets(resolve func(from string) (bucket, account string, err error)) (Topology, error) {
	out := t
	out.Queues = slices.Clone(t.Queues)
	for i, q := range out.Queues {
		if q.S3Notifications == nil || q.S3Notifications.From == "" {
			continue
		}
		n := *q.S3Notifications
		bucket, account, err := resolve(n.From)
		if err != nil {
			return t, fmt.Errorf("queue %s: s3_notifications.from: %w", q.Name, err)
		}
		n.Bucket, n.SourceAccount = bucket, account
		out.Queues[i].S3Notifications = &n
	}
	return out, out.Validate()
}

// Queue returns the queue named name (dead-letter queues included).
func (t Topology) Queue(name string) (Queue, bool) {
	for _, q := range t.AllQueues() {
		if q.Name == name {
			return q, true
		}
	}
	return Queue{}, false
}

// AllQueues returns the declared queues followed by their dead-letter queues,
// each DLQ as a plain queue with the DLQ's retention.
func (t Topology) AllQueues() []Queue {
	out := slices.Clone(t.Queues)
	seen := map[string]bool{}
	for _, q := range t.Queues {
		seen[q.Name] = true
	}
	for _, q := range t.Queues {
		if q.DeadLetter == nil || seen[q.DeadLetter.Queue] {
			continue
		}
		seen[q.DeadLetter.Queue] = true
		out = append(out, Queue{Name: q.DeadLetter.Queue, Type: q.Type, FIFO: q.FIFO, Retention: q.DeadLetter.Retention, Encryption: q.Encryption})
	}
	return out
}

// DeadLetterRoutingKey is the routing key a dead-lettered message of q carries.
func (d DeadLetter) DeadLetterRoutingKey() string {
	if d.RoutingKey != "" {
		return d.RoutingKey
	}
	return d.Queue
}

// AllBindings returns the declared bindings followed by the ones each
// dead-letter queue implies: its dead-letter exchange to it, by its routing key.
func (t Topology) AllBindings() []Binding {
	out := slices.Clone(t.Bindings)
	for _, q := range t.Queues {
		if d := q.DeadLetter; d != nil && d.Exchange != "" {
			b := Binding{Exchange: d.Exchange, Queue: d.Queue, Pattern: d.DeadLetterRoutingKey()}
			if !slices.Contains(out, b) {
				out = append(out, b)
			}
		}
	}
	return out
}

// Route says where a message published to exchange with routingKey lands:
// the names of the bound queues (dead-letter bindings included), in
// declaration order, each once.
func (t Topology) Route(exchange, routingKey string) []string {
	var kind string
	for _, e := range t.Exchanges {
		if e.Name == exchange {
			kind = e.Type
		}
	}
	var out []string
	for _, b := range t.AllBindings() {
		if b.Exchange != exchange || slices.Contains(out, b.Queue) {
			continue
		}
		if kind == Fanout || (kind == Direct && b.Pattern == routingKey) || (kind == Topic && Match(b.Pattern, routingKey)) {
			out = append(out, b.Queue)
		}
	}
	return out
}

// TopicQueues says which queues a message published to topic lands on: topic is
// a queue name, or "<exchange>/<routing-key>" (Route), or "/<queue>" (the
// default exchange). Nil when an exchange's bindings reach no queue.
func (t Topology) TopicQueues(topic string) []string {
	exchange, key, routed := strings.Cut(topic, "/")
	switch {
	case !routed:
		return []string{topic}
	case exchange == "":
		return []string{key}
	default:
		return t.Route(exchange, key)
	}
}

// Match reports whether an AMQP topic pattern matches a routing key: words are
// separated by '.', '*' matches exactly one word, '#' zero or more.
func Match(pattern, key string) bool {
	return match(strings.Split(pattern, "."), strings.Split(key, "."))
}

func match(p, k []string) bool {
	for len(p) > 0 {
		switch p[0] {
		case "#":
			for i := 0; i <= len(k); i++ {
				if match(p[1:], k[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(k) == 0 {
				return false
			}
		default:
			if len(k) == 0 || p[0] != k[0] {
				return false
			}
		}
		p, k = p[1:], k[1:]
	}
	return len(k) == 0
}

// Validate reports every problem, each with its path in the document.
func (t Topology) Validate() error {
	var errs []error
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}
	if t.Name == "" {
		add("name", "required")
	}
	exchanges := map[string]string{}
	for i, e := range t.Exchanges {
		p := fmt.Sprintf("exchanges[%d]", i)
		if e.Name == "" {
			add(p+".name", "required")
		} else if strings.HasPrefix(e.Name, "amq.") {
			add(p+".name", "%q: names starting with amq. are reserved by RabbitMQ", e.Name)
		}
		if _, dup := exchanges[e.Name]; dup && e.Name != "" {
			add(p+".name", "%q declared twice", e.Name)
		}
		exchanges[e.Name] = e.Type
		if e.Type != Topic && e.Type != Direct && e.Type != Fanout {
			add(p+".type", "%q is not one of topic, direct, fanout", e.Type)
		}
	}
	queues := map[string]bool{}
	for i, q := range t.Queues {
		p := fmt.Sprintf("queues[%d]", i)
		validateQueueName(add, p+".name", q.Name, q.FIFO)
		if queues[q.Name] && q.Name != "" {
			add(p+".name", "%q declared twice", q.Name)
		}
		queues[q.Name] = true
		if q.Type != "" && q.Type != Classic && q.Type != Quorum {
			add(p+".type", "%q is not one of classic, quorum", q.Type)
		}
		if q.ContentBasedDedup && !q.FIFO {
			add(p+".content_based_dedup", "only FIFO queues deduplicate")
		}
		durationRange(add, p+".visibility_timeout", q.VisibilityTimeout, 0, 12*time.Hour)
		durationRange(add, p+".retention", q.Retention, 0, 14*24*time.Hour)
		durationRange(add, p+".receive_wait", q.ReceiveWait, 0, 20*time.Second)
		durationRange(add, p+".delivery_delay", q.DeliveryDelay, 0, 15*time.Minute)
		if q.Encryption != "" && q.Encryption != "sse-sqs" {
			add(p+".encryption", "%q is not one of \"\", sse-sqs", q.Encryption)
		}
		if q.BatchSize < 0 || q.BatchSize > 10 {
			add(p+".batch_size", "%d is out of range 0..10 (SQS receives at most 10)", q.BatchSize)
		}
		if q.MaxReceives < 0 || q.MaxReceives > 1000 {
			add(p+".max_receives", "%d is out of range 0..1000", q.MaxReceives)
		}
		if q.MaxReceives > 0 && q.DeadLetter == nil {
			add(p+".max_receives", "set without a dead_letter queue: where would the message go?")
		}
		if pol := q.Policy; pol != nil {
			validatePolicy(add, p+".policy", q, *pol)
		}
		if n := q.S3Notifications; n != nil {
			validateS3Notifications(add, p+".s3_notifications", q, *n)
		}
		if d := q.DeadLetter; d != nil {
			validateQueueName(add, p+".dead_letter.queue", d.Queue, q.FIFO)
			if d.Queue == q.Name {
				add(p+".dead_letter.queue", "a queue cannot be its own dead-letter queue")
			}
			if d.Exchange != "" {
				if _, ok := exchanges[d.Exchange]; !ok {
					add(p+".dead_letter.exchange", "%q is not a declared exchange", d.Exchange)
				}
			}
			durationRange(add, p+".dead_letter.retention", d.Retention, 0, 14*24*time.Hour)
		}
	}
	for _, q := range t.AllQueues() {
		queues[q.Name] = true
	}
	for i, b := range t.Bindings {
		p := fmt.Sprintf("bindings[%d]", i)
		kind, ok := exchanges[b.Exchange]
		if !ok {
			add(p+".exchange", "%q is not a declared exchange", b.Exchange)
		}
		if !queues[b.Queue] {
			add(p+".queue", "%q is not a declared queue", b.Queue)
		}
		if kind != Topic && strings.ContainsAny(b.Pattern, "*#") {
			add(p+".routing_key", "%q: wildcards only work on topic exchanges", b.Pattern)
		}
		if b.Pattern == "" && kind != Fanout {
			add(p+".routing_key", "required on %s exchanges", kind)
		}
	}
	return errors.Join(errs...)
}

func validatePolicy(add func(string, string, ...any), path string, q Queue, pol Policy) {
	if pol.MaxAttempts < 0 || pol.MaxAttempts > 1000 {
		add(path+".max_attempts", "%d is out of range 0..1000", pol.MaxAttempts)
	}
	switch pol.Redelivery {
	case "", InProcess, Broker:
	default:
		add(path+".redelivery", "%q is not one of in-process, broker", pol.Redelivery)
	}
	switch pol.OnPermanent {
	case "", Drop, DeadLetterIt, FailUntilMax:
	default:
		add(path+".on_permanent", "%q is not one of drop, dead-letter, fail-until-max", pol.OnPermanent)
	}
	if pol.Redelivery == Broker && q.MaxReceives > 0 && pol.MaxAttempts > q.MaxReceives {
		add(path+".max_attempts", "%d is more than max_receives (%d): the broker would dead-letter the message first, without its reason", pol.MaxAttempts, q.MaxReceives)
	}
	if b := pol.Backoff; b != nil {
		if b.Initial < 0 || b.Max < 0 || (b.Max > 0 && b.Max < b.Initial) {
			add(path+".backoff", "want 0 <= initial (%s) <= max (%s)", b.Initial, b.Max)
		}
		if b.Multiplier != 0 && b.Multiplier < 1 {
			add(path+".backoff.multiplier", "%g: must be at least 1", b.Multiplier)
		}
		if b.Jitter < 0 || b.Jitter > 1 {
			add(path+".backoff.jitter", "%g is out of range 0..1", b.Jitter)
		}
	}
}

func validateS3Notifications(add func(string, string, ...any), path string, q Queue, n S3Notifications) {
	if n.From == "" && n.Bucket == "" {
		add(path, "names no bucket: set from (the setting holding it) or bucket")
	}
	if q.FIFO {
		add(path, "S3 event notifications cannot be sent to a FIFO queue")
	}
	if n.Bucket != "" {
		if err := ValidBucketName(n.Bucket); err != nil {
			add(path+".bucket", "%v", err)
		}
	}
	if a := n.SourceAccount; a != "" && !isAccountID(a) {
		add(path+".source_account", "%q is not a 12-digit AWS account id", a)
	}
}

// ValidBucketName checks an S3 bucket name against S3's naming rules for
// new buckets: 3 to 63 characters, lowercase letters, digits, '.' and '-',
// starting and ending with a letter or digit, no "..", not an IP address.
func ValidBucketName(name string) error {
	if len(name) < 3 || len(name) > 63 {
		return fmt.Errorf("bucket %q: 3 to 63 characters", name)
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := range len(name) {
		if c := name[i]; !alnum(c) && c != '.' && c != '-' {
			return fmt.Errorf("bucket %q: only lowercase letters, digits, '.' and '-'", name)
		}
	}
	if !alnum(name[0]) || !alnum(name[len(name)-1]) {
		return fmt.Errorf("bucket %q: starts and ends with a letter or digit", name)
	}
	if strings.Contains(name, "..") {
		return fmt.Errorf("bucket %q: no two adjacent periods", name)
	}
	if net.ParseIP(name) != nil {
		return fmt.Errorf("bucket %q: not an IP address", name)
	}
	return nil
}

func isAccountID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func validateQueueName(add func(string, string, ...any), path, name string, fifo bool) {
	switch {
	case name == "":
		add(path, "required")
		return
	case len(name) > 80:
		add(path, "%q is longer than 80 characters (SQS's limit)", name)
	}
	for _, c := range name {
		portable := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
		if !portable {
			add(path, "%q: only letters, digits, '-', '_' and '.' work on every broker", name)
			break
		}
	}
	if fifo != strings.HasSuffix(name, ".fifo") {
		add(path, "%q: a queue's name ends in .fifo exactly when it is FIFO (SQS's rule)", name)
	}
}

func durationRange(add func(string, string, ...any), path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		add(path, "%s is out of range %s..%s", d, lo, hi)
	}
	if d%time.Second != 0 {
		add(path, "%s: whole seconds only", d)
	}
}
