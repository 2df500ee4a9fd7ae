package sqs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/eventpipe/eventpipe/app/broker"
	"github.com/eventpipe/eventpipe/app/topology"
)

// Provisioning compiles a topology.Topology to SQS queues. Every queue of
// Topology.AllQueues becomes one SQS queue named QueueName(Config.QueuePrefix,
// its name), its dead-letter queue created first so that its ARN (which holds
// the SQS name) can go into the source queue's RedrivePolicy. Before any call
// every name is checked: one SQS would refuse, or two queues of the topology
// mapping to one SQS name, fail the whole call with *QueueNameErrors. A plan
// names a queue by its topology name, and by its SQS name too where they
// differ: "queue ai.analyze.resume (SQS ai-analyze-resume)".
//
// Mapping of the topology model to SQS queue attributes (a zero duration is
// SQS's default, which is then declared and checked like any other value):
//
//	topology                 SQS attribute                   zero value means
//	VisibilityTimeout        VisibilityTimeout (s)           30 (SQS default)
//	Retention                MessageRetentionPeriod (s)      345600 (4 days)
//	DeadLetter.Retention     DLQ's MessageRetentionPeriod    345600 (4 days)
//	ReceiveWait              ReceiveMessageWaitTimeSeconds   0
//	DeliveryDelay            DelaySeconds                    0
//	Encryption "sse-sqs"     SqsManagedSseEnabled=true       "" = not managed (see below)
//	FIFO                     FifoQueue (fixed at creation)   standard queue
//	ContentBasedDedup        ContentBasedDeduplication       false (FIFO only)
//	DeadLetter+MaxReceives   RedrivePolicy {deadLetterTargetArn, maxReceiveCount}
//	                                                         MaxReceives 0 = no RedrivePolicy (DLQ still created)
//	(broker.MaxPayloadBytes) MaximumMessageSize              always 1048576
//	S3Notifications.Bucket   Policy: statement Sid           no statement managed
//	                         eventpipe-s3-notifications
//	BatchSize, Type          — (consumer side / RabbitMQ only)
//
// Encryption "" leaves SqsManagedSseEnabled alone instead of turning
// encryption off: SQS enables SSE-SQS on new queues by default, and a missing
// key in a YAML file must never make a live queue less protected. Queues
// encrypted with KMS (KmsMasterKeyId) are not inspected.
//
// S3Notifications manages one statement of the queue's access policy, the
// one with Sid eventpipe-s3-notifications: s3.amazonaws.com may
// sqs:SendMessage to the queue when aws:SourceArn is the bucket's ARN (in
// the queue's partition) and, when SourceAccount is set, aws:SourceAccount
// is that account — AWS's documented policy for S3 event notifications.
// The policy's other statements (an operator's, another service's) are kept
// as they are; a queue whose S3Notifications has no Bucket (the setting is
// not set) keeps its policy untouched. A queue being created gets the
// statement right after CreateQueue, once its ARN is known.
//
// MaximumMessageSize is managed because the pipeline's one size limit is
// 1 MiB on every broker: a queue created before SQS raised its default keeps
// 256 KiB and would refuse messages that Publish accepted.

// Attribute names managed by provisioning.
const (
	attrVisibility  = string(types.QueueAttributeNameVisibilityTimeout)
	attrRetention   = string(types.QueueAttributeNameMessageRetentionPeriod)
	attrWait        = string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds)
	attrDelay       = string(types.QueueAttributeNameDelaySeconds)
	attrMaxSize     = string(types.QueueAttributeNameMaximumMessageSize)
	attrSSE         = string(types.QueueAttributeNameSqsManagedSseEnabled)
	attrFIFO        = string(types.QueueAttributeNameFifoQueue)
	attrContentDedu = string(types.QueueAttributeNameContentBasedDeduplication)
	attrRedrive     = string(types.QueueAttributeNameRedrivePolicy)
	attrArn         = string(types.QueueAttributeNameQueueArn)
	attrPolicy      = string(types.QueueAttributeNamePolicy)
)

// s3StatementSid names the access-policy statement provisioning manages for
// a queue that receives S3 event notifications.
const s3StatementSid = "eventpipe-s3-notifications"

// SQS defaults for attributes whose declared zero value means "the default".
const (
	defaultVisibility = 30 * time.Second
	defaultRetention  = 4 * 24 * time.Hour
)

var _ broker.Provisioner = (*PubSub)(nil)

// redrivePolicy is SQS's RedrivePolicy document. maxReceiveCount is a number
// when we write it; SQS (and tools) may hand it back as a string, which
// liveRedrive accepts too.
type redrivePolicy struct {
	DeadLetterTargetArn string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

func (r redrivePolicy) encode() string {
	b, err := json.Marshal(r)
	if err != nil { // a struct of a string and an int always marshals
		panic(err)
	}
	return string(b)
}

func parseRedrive(s string) (redrivePolicy, error) {
	var raw struct {
		DeadLetterTargetArn string      `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.Number `json:"maxReceiveCount"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return redrivePolicy{}, err
	}
	n, err := strconv.Atoi(raw.MaxReceiveCount.String())
	if err != nil {
		return redrivePolicy{}, fmt.Errorf("maxReceiveCount %q: %w", raw.MaxReceiveCount, err)
	}
	return redrivePolicy{DeadLetterTargetArn: raw.DeadLetterTargetArn, MaxReceiveCount: n}, nil
}

// desired is what one queue should look like on SQS: its attributes as SQS
// spells them, and its redrive policy apart (nil = none), because the policy
// needs its DLQ's ARN.
type desired struct {
	name    string // the SQS queue name
	topic   string // the topology name
	object  string // how a plan names it (queueObject)
	attrs   map[string]string
	redrive *redrivePolicy
	// s3 is the bucket whose notifications the queue's policy admits; nil
	// leaves the policy alone.
	s3 *topology.S3Notifications
}

// queueObject is how a plan names the queue of topology name topic whose SQS
// name is name.
func queueObject(topic, name string) string {
	if topic == name {
		return "queue " + name
	}
	return "queue " + topic + " (SQS " + name + ")"
}

func seconds(d, zero time.Duration) string {
	if d == 0 {
		d = zero
	}
	return strconv.Itoa(int(d / time.Second))
}

// desiredQueue compiles q, whose SQS name is name; dlqArn is the ARN of its
// dead-letter queue ("" when it has none).
func desiredQueue(q topology.Queue, name, dlqArn string) desired {
	d := desired{name: name, topic: q.Name, object: queueObject(q.Name, name), attrs: map[string]string{
		attrVisibility: seconds(q.VisibilityTimeout, defaultVisibility),
		attrRetention:  seconds(q.Retention, defaultRetention),
		attrWait:       seconds(q.ReceiveWait, 0),
		attrDelay:      seconds(q.DeliveryDelay, 0),
		attrMaxSize:    strconv.Itoa(broker.MaxPayloadBytes),
	}}
	if q.Encryption == "sse-sqs" {
		d.attrs[attrSSE] = "true"
	}
	// FifoQueue is compared for every queue but sent only for FIFO ones
	// (createAttributes): it cannot change, and standard queues omit it.
	d.attrs[attrFIFO] = strconv.FormatBool(q.FIFO)
	if q.FIFO {
		d.attrs[attrContentDedu] = strconv.FormatBool(q.ContentBasedDedup)
	}
	if q.DeadLetter != nil && q.MaxReceives > 0 {
		d.redrive = &redrivePolicy{DeadLetterTargetArn: dlqArn, MaxReceiveCount: q.MaxReceives}
	}
	if n := q.S3Notifications; n != nil && n.Bucket != "" {
		d.s3 = n
	}
	return d
}

// s3Statement is the access-policy statement that lets S3 send n's bucket's
// event notifications to the queue queueArn (AWS's documented example: the
// s3.amazonaws.com service principal, sqs:SendMessage, the bucket as
// aws:SourceArn, the owner as aws:SourceAccount).
func s3Statement(queueArn string, n topology.S3Notifications) map[string]any {
	partition := "aws"
	if parts := strings.SplitN(queueArn, ":", 3); len(parts) == 3 && parts[0] == "arn" && parts[1] != "" {
		partition = parts[1]
	}
	cond := map[string]any{"ArnLike": map[string]any{"aws:SourceArn": "arn:" + partition + ":s3:::" + n.Bucket}}
	if n.SourceAccount != "" {
		cond["StringEquals"] = map[string]any{"aws:SourceAccount": n.SourceAccount}
	}
	return map[string]any{
		"Sid":       s3StatementSid,
		"Effect":    "Allow",
		"Principal": map[string]any{"Service": "s3.amazonaws.com"},
		"Action":    "sqs:SendMessage",
		"Resource":  queueArn,
		"Condition": cond,
	}
}

// withStatement returns the access policy live (SQS's Policy attribute, ""
// for none) with stmt in place of its statement of the same Sid, or added:
// the policy to set and the statement it replaces ("" when there was
// none); changed is false when live already has stmt, compared as JSON
// values (SQS may hand a policy back reformatted). Statements with other
// Sids are kept as they are.
func withStatement(live string, stmt map[string]any) (policy, had string, changed bool, err error) {
	canon := func(v any) string {
		b, err := json.Marshal(v) // maps marshal with sorted keys
		if err != nil {           // decoded JSON always marshals
			panic(err)
		}
		return string(b)
	}
	want := canon(stmt)
	doc := map[string]any{"Version": "2012-10-17"}
	if strings.TrimSpace(live) != "" {
		if err := json.Unmarshal([]byte(live), &doc); err != nil {
			return "", "", false, fmt.Errorf("access policy is not JSON: %w", err)
		}
	}
	var statements []any
	switch st := doc["Statement"].(type) {
	case nil:
	case []any:
		statements = st
	case map[string]any: // IAM's grammar allows a single statement
		statements = []any{st}
	default:
		return "", "", false, fmt.Errorf("access policy: Statement is a %T", st)
	}
	found := false
	for i, st := range statements {
		m, ok := st.(map[string]any)
		if !ok || m["Sid"] != s3StatementSid {
			continue
		}
		found, had = true, canon(m)
		if had == want {
			return live, had, false, nil
		}
		statements[i] = stmt
	}
	if !found {
		statements = append(statements, stmt)
	}
	doc["Statement"] = statements
	return canon(doc), had, true, nil
}

// policyChange compares the queue's live access policy with d's S3
// statement: the change and the policy to set, or nil when nothing is to be
// done. A live policy that cannot be read is reported with a fix and left
// as it is.
func (d desired) policyChange(live map[string]string) (*topology.Change, string) {
	if d.s3 == nil {
		return nil, ""
	}
	object := "queue " + d.name
	attr := attrPolicy + ".Statement[" + s3StatementSid + "]"
	stmt := s3Statement(live[attrArn], *d.s3)
	policy, had, changed, err := withStatement(live[attrPolicy], stmt)
	if err != nil {
		return &topology.Change{Kind: topology.Differs, Object: object, Attribute: attrPolicy, Have: live[attrPolicy],
			Fix: fmt.Sprintf("%v: fix the queue's access policy by hand, then apply again", err)}, ""
	}
	if !changed {
		return nil, ""
	}
	b, _ := json.Marshal(stmt)
	return &topology.Change{Kind: topology.Differs, Object: object, Attribute: attr, Want: string(b), Have: had}, policy
}

// createAttributes are the attributes CreateQueue gets.
func (d desired) createAttributes() map[string]string {
	attrs := make(map[string]string, len(d.attrs)+1)
	for k, v := range d.attrs {
		if k == attrFIFO && v != "true" {
			continue
		}
		attrs[k] = v
	}
	if d.redrive != nil {
		attrs[attrRedrive] = d.redrive.encode()
	}
	return attrs
}

// diff compares d with a live queue's attributes. set holds what
// SetQueueAttributes can change in place; the changes that need it carry no
// Fix, the ones it cannot resolve do.
func (d desired) diff(live map[string]string) (changes topology.Plan, set map[string]string) {
	object := d.object
	set = map[string]string{}
	for _, k := range sortedKeys(d.attrs) {
		want := d.attrs[k]
		have, ok := live[k]
		if !ok && (k == attrFIFO || k == attrContentDedu || k == attrSSE) {
			have = "false" // SQS omits a false boolean on some queues
		}
		if want == have {
			continue
		}
		c := topology.Change{Kind: topology.Differs, Object: object, Attribute: k, Want: want, Have: have}
		if k == attrFIFO {
			c.Fix = fmt.Sprintf("SQS cannot change FifoQueue of an existing queue: create a new queue with the declared type "+
				"(a FIFO queue's name must end in .fifo), move publishers to it, drain %s, then delete it", d.name)
		} else {
			set[k] = want
		}
		changes = append(changes, c)
	}

	liveRaw := live[attrRedrive]
	switch {
	case d.redrive == nil && liveRaw != "":
		changes = append(changes, topology.Change{Kind: topology.Differs, Object: object, Attribute: attrRedrive, Have: liveRaw})
		set[attrRedrive] = "" // an empty RedrivePolicy removes it
	case d.redrive != nil && liveRaw == "":
		changes = append(changes, topology.Change{Kind: topology.Differs, Object: object, Attribute: attrRedrive, Want: d.redrive.encode()})
		set[attrRedrive] = d.redrive.encode()
	case d.redrive != nil:
		have, err := parseRedrive(liveRaw)
		if err != nil {
			changes = append(changes, topology.Change{Kind: topology.Differs, Object: object, Attribute: attrRedrive, Want: d.redrive.encode(), Have: liveRaw})
			set[attrRedrive] = d.redrive.encode()
			break
		}
		if have.DeadLetterTargetArn != d.redrive.DeadLetterTargetArn {
			changes = append(changes, topology.Change{Kind: topology.Differs, Object: object, Attribute: attrRedrive + ".deadLetterTargetArn",
				Want: d.redrive.DeadLetterTargetArn, Have: have.DeadLetterTargetArn})
			set[attrRedrive] = d.redrive.encode()
		}
		if have.MaxReceiveCount != d.redrive.MaxReceiveCount {
			changes = append(changes, topology.Change{Kind: topology.Differs, Object: object, Attribute: attrRedrive + ".maxReceiveCount",
				Want: strconv.Itoa(d.redrive.MaxReceiveCount), Have: strconv.Itoa(have.MaxReceiveCount)})
			set[attrRedrive] = d.redrive.encode()
		}
	}
	if c, policy := d.policyChange(live); c != nil {
		changes = append(changes, *c)
		if c.Fix == "" {
			set[attrPolicy] = policy
		}
	}
	if live[attrFIFO] != "true" && d.attrs[attrFIFO] == "true" {
		// A standard queue cannot take FIFO attributes: SQS would refuse the
		// whole SetQueueAttributes call. They wait for the FifoQueue fix.
		for i, c := range changes {
			if c.Attribute == attrContentDedu {
				delete(set, attrContentDedu)
				changes[i].Fix = "set on the FIFO queue that replaces this one (see FifoQueue)"
			}
		}
	}
	return changes, set
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}

// liveQueue is a queue found on SQS.
type liveQueue struct {
	url   string
	attrs map[string]string
}

// provisioner walks a topology in dependency order: a queue's dead-letter
// queue before the queue. apply selects Apply over Plan.
type provisioner struct {
	p    *PubSub
	t    topology.Topology
	mode provisionMode

	queues map[string]topology.Queue
	names  map[string]string // topology name → SQS name
	done   map[string]string // name → ARN (derived when Plan finds it missing)
	busy   map[string]bool   // on the current dependency path: cycle check
	// plan holds every change found (Plan; CreateMissing: those of the
	// queues that exist), or only the unresolved ones (Apply).
	plan topology.Plan
}

// provisionMode is what provision does with what it finds.
type provisionMode int

const (
	// planOnly changes nothing and reports every difference.
	planOnly provisionMode = iota
	// applyAll creates missing queues and sets differing attributes.
	applyAll
	// createMissing creates missing queues and reports, without changing,
	// the differences of the queues that exist.
	createMissing
)

// Plan compares the declared topology's queues with the live ones: missing
// queues, and every managed attribute that differs (see the mapping table
// above). It changes nothing. SQS has no exchanges or bindings: those are
// routed by the pipeline itself and have nothing to compare here.
func (p *PubSub) Plan(ctx context.Context, t topology.Topology) (topology.Plan, error) {
	return p.provision(ctx, t, planOnly)
}

// Apply creates the missing queues (each dead-letter queue before its
// source) with their attributes and redrive policy, and sets differing
// attributes in place with SetQueueAttributes. It never deletes or recreates
// a queue: what SQS cannot change in place (FifoQueue) is returned with the
// operator's fix. Running it again changes nothing.
func (p *PubSub) Apply(ctx context.Context, t topology.Topology) (topology.Plan, error) {
	return p.provision(ctx, t, applyAll)
}

// CreateMissing creates the declared queues that do not exist (each
// dead-letter queue before its source) with their attributes and redrive
// policy, as Apply does, and leaves the queues that exist as they are: it
// returns their differences from the declaration (drift), for the caller to
// report. This is Config.CreateQueues for a broker that knows its topology:
// a queue serve creates has the spec's visibility timeout, FIFO attributes
// and dead-letter queue, not SQS's defaults, while changing a live queue
// stays `eventpipe topology apply`'s decision.
func (p *PubSub) CreateMissing(ctx context.Context, t topology.Topology) (topology.Plan, error) {
	return p.provision(ctx, t, createMissing)
}

func (p *PubSub) provision(ctx context.Context, t topology.Topology, mode provisionMode) (topology.Plan, error) {
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("sqs: topology %s: %w", t.Name, err)
	}
	pr := &provisioner{p: p, t: t, mode: mode, queues: map[string]topology.Queue{}, done: map[string]string{}, busy: map[string]bool{}}
	all := t.AllQueues()
	topics := make([]string, len(all))
	for i, q := range all {
		pr.queues[q.Name] = q
		topics[i] = q.Name
	}
	names, errs := p.names.queues(topics)
	if len(errs) > 0 {
		return nil, fmt.Errorf("sqs: topology %s: %w", t.Name, errors.Join(errs...))
	}
	pr.names = names
	for _, q := range all {
		if _, err := pr.ensure(ctx, q.Name); err != nil {
			return nil, err
		}
	}
	pr.plan.Sort()
	return pr.plan, nil
}

// ensure plans or applies the queue named name, its DLQ first, and returns
// its ARN.
func (pr *provisioner) ensure(ctx context.Context, name string) (string, error) {
	if arn, ok := pr.done[name]; ok {
		return arn, nil
	}
	if pr.busy[name] {
		return "", fmt.Errorf("sqs: topology %s: dead-letter cycle through queue %s", pr.t.Name, name)
	}
	pr.busy[name] = true
	defer delete(pr.busy, name)

	q := pr.queues[name]
	sqsName := pr.names[name]
	var dlqArn string
	if q.DeadLetter != nil {
		var err error
		if dlqArn, err = pr.ensure(ctx, q.DeadLetter.Queue); err != nil {
			return "", err
		}
	}
	live, err := pr.p.lookupQueue(ctx, sqsName)
	if err != nil {
		return "", err
	}
	if q.DeadLetter != nil && dlqArn == "" && live != nil {
		dlqArn = siblingOf(live.attrs[attrArn], pr.names[q.DeadLetter.Queue]) // Plan, DLQ missing
	}
	want := desiredQueue(q, sqsName, dlqArn)
	if live == nil && pr.mode != planOnly {
		live, err = pr.p.createQueue(ctx, want)
		if err != nil {
			return "", err
		}
		if live == nil { // created: nothing to compare but the access policy
			created, err := pr.p.lookupQueue(ctx, sqsName)
			if err != nil {
				return "", err
			}
			if created == nil || created.attrs[attrArn] == "" {
				return "", fmt.Errorf("sqs: queue %s: created but not found with an ARN", name)
			}
			if c, policy := want.policyChange(created.attrs); c != nil {
				if c.Fix != "" {
					pr.plan = append(pr.plan, *c)
				} else if err := pr.p.setAttributes(ctx, created.url, name, map[string]string{attrPolicy: policy}); err != nil {
					return "", err
				}
			}
			arn := created.attrs[attrArn]
			pr.done[name] = arn
			return arn, nil
		}
		// Someone else created it meanwhile: compare like any live queue.
	}
	if live == nil { // Plan: missing
		pr.plan = append(pr.plan, topology.Change{Kind: topology.Missing, Object: want.object})
		arn := pr.siblingArn(sqsName)
		pr.done[name] = arn
		return arn, nil
	}

	arn := live.attrs[attrArn]
	changes, set := want.diff(live.attrs)
	if pr.mode != applyAll {
		pr.plan = append(pr.plan, changes...)
		pr.done[name] = arn
		return arn, nil
	}
	for _, c := range changes {
		if c.Fix != "" {
			pr.plan = append(pr.plan, c)
		}
	}
	if len(set) > 0 {
		if err := pr.p.setAttributes(ctx, live.url, sqsName, set); err != nil {
			return "", err
		}
	}
	pr.done[name] = arn
	return arn, nil
}

// siblingArn derives the ARN a queue missing from SQS will have: SQS ARNs are
// arn:<partition>:sqs:<region>:<account>:<name>, the same for every queue of
// one client except the name. Used only by Plan, to compare a live queue's
// RedrivePolicy with a DLQ that does not exist yet; "" when no ARN is known.
func (pr *provisioner) siblingArn(name string) string {
	for _, arn := range pr.done {
		if s := siblingOf(arn, name); s != "" {
			return s
		}
	}
	return ""
}

func siblingOf(arn, name string) string {
	if i := strings.LastIndexByte(arn, ':'); i > 0 && strings.HasPrefix(arn, "arn:") {
		return arn[:i+1] + name
	}
	return ""
}

func (p *PubSub) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, p.cfg.RequestTimeout)
}

// lookupQueue returns the queue's URL and all its attributes, or nil when it
// does not exist.
func (p *PubSub) lookupQueue(ctx context.Context, name string) (*liveQueue, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	u, err := p.client.GetQueueUrl(cctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		var missing *types.QueueDoesNotExist
		if errors.As(err, &missing) {
			return nil, nil
		}
		return nil, fmt.Errorf("sqs: get queue %s: %w", name, err)
	}
	url := aws.ToString(u.QueueUrl)
	attrs, err := p.client.GetQueueAttributes(cctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		return nil, fmt.Errorf("sqs: get attributes of queue %s: %w", name, err)
	}
	return &liveQueue{url: url, attrs: attrs.Attributes}, nil
}

// createQueue creates the queue with its attributes. When SQS says a queue of
// that name already exists with other attributes (created meanwhile), it
// returns that queue for comparison; otherwise nil.
func (p *PubSub) createQueue(ctx context.Context, d desired) (*liveQueue, error) {
	cctx, cancel := p.call(ctx)
	defer cancel()
	_, err := p.client.CreateQueue(cctx, &sqs.CreateQueueInput{QueueName: aws.String(d.name), Attributes: d.createAttributes()})
	if err == nil {
		p.logger.Info("Created SQS queue", watermill.LogFields{"queue": d.name, "topic": d.topic})
		return nil, nil
	}
	var exists *types.QueueNameExists
	if !errors.As(err, &exists) {
		return nil, fmt.Errorf("sqs: create queue %s: %w", d.name, err)
	}
	live, lerr := p.lookupQueue(ctx, d.name)
	if lerr != nil {
		return nil, lerr
	}
	if live == nil {
		return nil, fmt.Errorf("sqs: create queue %s: %w (and then not found)", d.name, err)
	}
	return live, nil
}

func (p *PubSub) setAttributes(ctx context.Context, url, name string, set map[string]string) error {
	cctx, cancel := p.call(ctx)
	defer cancel()
	if _, err := p.client.SetQueueAttributes(cctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: set}); err != nil {
		return fmt.Errorf("sqs: set attributes %s of queue %s: %w", strings.Join(sortedKeys(set), ", "), name, err)
	}
	p.logger.Info("Updated SQS queue attributes", watermill.LogFields{"queue": name, "attributes": strings.Join(sortedKeys(set), ",")})
	return nil
}
