// Package catalog is the StackUp message catalog (the StackUp RabbitMQ
// messaging contract, §5): every message type — the Core → AI requests, the
// AI → Core callbacks and the realtime notifications — with its exchange, its
// queue, its payload schema per version and that schema's validation.
//
// A payload is decoded leniently by consumers (unknown fields ignored, §7)
// and strictly for publishers (ValidateStrict, Encode: unknown fields and
// §5.2 secrets refused). The envelope itself is package envelope's; a
// consumer decodes both at once (Decode), with one schema check per body.
package catalog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/schemas"
	"github.com/eventpipe/eventpipe/handlers/stackup/envelope"
)

// Exchanges of §1.
const (
	ExchangeCoreToAI = "stackup.core-to-ai"
	ExchangeAIToCore = "stackup.ai-to-core"
	ExchangeRealtime = "stackup.realtime"
)

// Message types (= routing keys, §2).
const (
	AnalyzeResume          = "analyze.resume"
	AnalyzeRepository      = "analyze.repository"
	AnalyzeCoverLetter     = "analyze.cover_letter"
	AnalyzeWeb             = "analyze.web"
	GenerateQuestions      = "generate.questions"
	GenerateFollowup       = "generate.followup"
	GenerateFeedback       = "generate.feedback"
	AnalyzeVoice           = "analyze.voice"
	GenerateTTS            = "generate.tts"
	CallbackAnalysis       = "callback.analysis"
	CallbackQuestions      = "callback.questions"
	CallbackFeedback       = "callback.feedback"
	CallbackVoice          = "callback.voice"
	CallbackTTS            = "callback.tts"
	RealtimeSessionNotify  = "realtime.session.notify"
	RealtimeUserNotify     = "realtime.user.notify"
	RealtimeDocumentNotify = "realtime.document.notify"
)

// V1 is the version every §5 schema has today.
const V1 = "v1"

// Kind is what a message type is for.
type Kind int

// The kinds.
const (
	Request Kind = iota
	Callback
	Realtime
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Request:
		return "request"
	case Callback:
		return "callback"
	default:
		return "realtime"
	}
}

// Payload is a decoded payload of one message type and version.
type Payload interface {
	// Validate checks the payload's own rules; env gives the context ids
	// some types require (realtime notifications).
	Validate(env envelope.Envelope) error
}

// Schema is one version of a message type's payload.
type Schema struct {
	Version string
	// New returns a pointer to an empty payload to decode into.
	New func() Payload
}

// Type is one message type of the catalog.
type Type struct {
	// Name is the messageType and the routing key.
	Name     string
	Kind     Kind
	Exchange string
	// Queue is the work queue the routing key reaches (§1).
	Queue string
	// Callback is the callback type a request is answered with ("" for
	// callbacks and notifications).
	Callback string
	// Versions maps a version to its schema.
	Versions map[string]Schema
}

// Topic is where a message of this type is published: "<exchange>/<key>",
// routed by the topology's bindings on every broker.
func (t Type) Topic() string { return t.Exchange + "/" + t.Name }

// Catalog is a set of message types. The zero value is empty; Default is
// §5's.
type Catalog struct {
	types map[string]Type
}

// Default returns the catalog of §5: every type at v1. The §7 procedure
// adds a v2 with With while v1 is still handled.
func Default() Catalog {
	c := Catalog{types: map[string]Type{}}
	add := func(name string, kind Kind, exchange, queue, callback string, newPayload func() Payload) {
		c.types[name] = Type{Name: name, Kind: kind, Exchange: exchange, Queue: queue, Callback: callback,
			Versions: map[string]Schema{V1: {Version: V1, New: newPayload}}}
	}
	add(AnalyzeResume, Request, ExchangeCoreToAI, "ai.analyze.resume", CallbackAnalysis, func() Payload { return &AnalyzeResumeV1{} })
	add(AnalyzeRepository, Request, ExchangeCoreToAI, "ai.analyze.repository", CallbackAnalysis, func() Payload { return &AnalyzeRepositoryV1{} })
	add(AnalyzeCoverLetter, Request, ExchangeCoreToAI, "ai.analyze.cover_letter", CallbackAnalysis, func() Payload { return &AnalyzeCoverLetterV1{} })
	add(AnalyzeWeb, Request, ExchangeCoreToAI, "ai.analyze.web", CallbackAnalysis, func() Payload { return &AnalyzeWebV1{} })
	add(GenerateQuestions, Request, ExchangeCoreToAI, "ai.generate.questions", CallbackQuestions, func() Payload { return &GenerateQuestionsV1{} })
	add(GenerateFollowup, Request, ExchangeCoreToAI, "ai.generate.followup", CallbackQuestions, func() Payload { return &GenerateFollowupV1{} })
	add(GenerateFeedback, Request, ExchangeCoreToAI, "ai.generate.feedback", CallbackFeedback, func() Payload { return &GenerateFeedbackV1{} })
	add(AnalyzeVoice, Request, ExchangeCoreToAI, "ai.analyze.voice", CallbackVoice, func() Payload { return &AnalyzeVoiceV1{} })
	add(GenerateTTS, Request, ExchangeCoreToAI, "ai.generate.tts", CallbackTTS, func() Payload { return &GenerateTTSV1{} })
	add(CallbackAnalysis, Callback, ExchangeAIToCore, "core.callback.analysis", "", func() Payload { return &AnalysisCallbackV1{} })
	add(CallbackQuestions, Callback, ExchangeAIToCore, "core.callback.questions", "", func() Payload { return &QuestionsCallbackV1{} })
	add(CallbackFeedback, Callback, ExchangeAIToCore, "core.callback.feedback", "", func() Payload { return &FeedbackCallbackV1{} })
	add(CallbackVoice, Callback, ExchangeAIToCore, "core.callback.voice", "", func() Payload { return &VoiceCallbackV1{} })
	add(CallbackTTS, Callback, ExchangeAIToCore, "core.callback.tts", "", func() Payload { return &TTSCallbackV1{} })
	for _, n := range []string{RealtimeSessionNotify, RealtimeUserNotify, RealtimeDocumentNotify} {
		add(n, Realtime, ExchangeRealtime, "q.realtime.session.notify", "", func() Payload { return &NotifyV1{} })
	}
	return c
}

// With returns a copy of c in which messageType also has schema s (a new
// version, §7 step 2). The type must exist.
func (c Catalog) With(messageType string, s Schema) (Catalog, error) {
	t, ok := c.types[messageType]
	if !ok {
		return Catalog{}, fmt.Errorf("catalog: unknown message type %q", messageType)
	}
	if s.Version == "" || s.New == nil {
		return Catalog{}, fmt.Errorf("catalog: %s: a schema needs a version and New", messageType)
	}
	out := Catalog{types: maps.Clone(c.types)}
	t.Versions = maps.Clone(t.Versions)
	t.Versions[s.Version] = s
	out.types[messageType] = t
	return out, nil
}

// IsZero reports an empty catalog (the zero value).
func (c Catalog) IsZero() bool { return len(c.types) == 0 }

// Type returns the message type named name.
func (c Catalog) Type(name string) (Type, bool) {
	t, ok := c.types[name]
	return t, ok
}

// Types returns every type, sorted by name.
func (c Catalog) Types() []Type {
	out := make([]Type, 0, len(c.types))
	for _, n := range slices.Sorted(maps.Keys(c.types)) {
		out = append(out, c.types[n])
	}
	return out
}

// ByQueue returns the types whose routing key reaches queue, sorted.
func (c Catalog) ByQueue(queue string) []Type {
	var out []Type
	for _, t := range c.Types() {
		if t.Queue == queue {
			out = append(out, t)
		}
	}
	return out
}

// UnknownTypeError is a messageType the catalog does not have.
type UnknownTypeError struct{ MessageType string }

// Error implements error.
func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("stackup catalog: unknown messageType %q", e.MessageType)
}

// NoVersionError is a version of a known type without a schema (or, for a
// consumer, without a handler).
type NoVersionError struct{ MessageType, Version string }

// Error implements error.
func (e *NoVersionError) Error() string {
	return fmt.Sprintf("stackup catalog: %s version %q has no handler", e.MessageType, e.Version)
}

// Schema returns the schema of env's type and version. Errors are permanent.
func (c Catalog) Schema(messageType, version string) (Type, Schema, error) {
	t, ok := c.types[messageType]
	if !ok {
		return Type{}, Schema{}, failure.AsPermanent(&UnknownTypeError{MessageType: messageType})
	}
	s, ok := t.Versions[version]
	if !ok {
		return Type{}, Schema{}, failure.AsPermanent(&NoVersionError{MessageType: messageType, Version: version})
	}
	return t, s, nil
}

// PayloadError is a payload that does not decode or validate.
type PayloadError struct {
	MessageType, Version string
	Err                  error
}

// Error implements error.
func (e *PayloadError) Error() string {
	return fmt.Sprintf("stackup %s %s payload: %v", e.MessageType, e.Version, e.Err)
}

// Unwrap returns the decode or validation error.
func (e *PayloadError) Unwrap() error { return e.Err }

// DecodePayload decodes env's payload leniently by its type and version
// (§7: unknown fields ignored) and validates it: against the type's lenient
// schema where the StackUp catalog has one (v1), then the payload's own Go
// rules (what a schema cannot say). Every error is permanent and names the
// field at fault.
func (c Catalog) DecodePayload(env envelope.Envelope) (Payload, error) {
	_, s, err := c.Schema(env.MessageType, env.Version)
	if err != nil {
		return nil, err
	}
	if err := checkSchema(env, schemas.Lenient); err != nil {
		return nil, err
	}
	return decodeChecked(env, s)
}

// decodeChecked decodes env's payload, which its type's schema (if any)
// accepted, by s and applies the payload's Go rules.
func decodeChecked(env envelope.Envelope, s Schema) (Payload, error) {
	p := s.New()
	if err := json.Unmarshal(env.Payload, p); err != nil {
		return nil, failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	if err := p.Validate(env); err != nil {
		return nil, failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	return p, nil
}

// Decode is a consumer's decode of one body: what envelope.Decode and then
// DecodePayload do, with the same results and errors, but the body is read
// by the schemas once (schemas.Decode) and checked once. Every v1 type's
// schema includes the envelope's (section 3), so the body is checked against
// its type's lenient schema alone, or against the envelope's when the type
// or version has no schema. accept runs between the envelope and the
// payload (a consumer's routing-key and handler checks), so the errors come
// in the two passes' order: the envelope's (*envelope.Error), accept's, the
// catalog's (UnknownTypeError, NoVersionError), the payload's
// (*PayloadError). The envelope is returned with any error after it decoded.
func (c Catalog) Decode(data []byte, accept func(envelope.Envelope) error) (envelope.Envelope, Payload, error) {
	env, checked, err := decodeOnce(data)
	if err != nil {
		return envelope.Envelope{}, nil, err
	}
	if accept != nil {
		if err := accept(env); err != nil {
			return env, nil, err
		}
	}
	if !checked {
		p, err := c.DecodePayload(env)
		return env, p, err
	}
	_, s, err := c.Schema(env.MessageType, env.Version)
	if err != nil {
		return env, nil, err
	}
	p, err := decodeChecked(env, s)
	return env, p, err
}

// envelopeFields and contextFields are the JSON names envelope.Envelope
// and envelope.Context decode.
var (
	envelopeFields = []string{"messageId", "messageType", "version", "traceId", "publishedAt", "publisher", "payload", "context"}
	contextFields  = []string{"userId", "sessionId", "documentId"}
)

// decodeOnce decodes data's envelope with one schema check of one decoded
// value, and reports whether that check was the type's schema, payload
// included. It only ever decides that a body passes: every body it is not
// sure of — one that fails the check, or that encoding/json would read
// differently from the schemas (below) — takes the two passes
// (envelope.Decode, and DecodePayload's check after), whose errors are then
// the consumer's, word for word. A body passing its type's schema as sent
// passes it as DecodePayload re-encodes it too: the type schemas constrain
// only the envelope's fields and the payload, which the re-encoding keeps
// (the payload byte for byte), dropping only unknown fields and null ids.
func decodeOnce(data []byte) (envelope.Envelope, bool, error) {
	twoPass := func() (envelope.Envelope, bool, error) {
		env, err := envelope.Decode(data)
		return env, false, err
	}
	v, err := schemas.Decode(data)
	if err != nil {
		return twoPass()
	}
	obj, _ := v.(map[string]any)
	// encoding/json matches field names case-insensitively, the schemas
	// exactly: with a "MessageType" or a "Payload" beside the real field,
	// the struct and the checked value could hold different messages.
	if obj == nil || foldsOnto(obj, envelopeFields) {
		return twoPass()
	}
	if ctx, ok := obj["context"].(map[string]any); ok && foldsOnto(ctx, contextFields) {
		return twoPass()
	}
	messageType, _ := obj["messageType"].(string)
	version, _ := obj["version"].(string)
	m, typed, err := typeSchema(messageType, version)
	if err == nil && !typed {
		m, err = envelope.Schema()
	}
	if err != nil || m.CheckValue(v, schemas.Lenient) != nil {
		return twoPass()
	}
	var env envelope.Envelope
	if err := json.Unmarshal(data, &env); err != nil || env.MessageType != messageType || env.Version != version {
		return twoPass()
	}
	return env, typed, nil
}

// foldsOnto reports whether obj has a key that is not one of names but
// that encoding/json would take for one (a case-insensitive match).
func foldsOnto(obj map[string]any, names []string) bool {
	for k := range obj {
		if slices.Contains(names, k) {
			continue
		}
		for _, n := range names {
			if strings.EqualFold(k, n) {
				return true
			}
		}
	}
	return false
}

// typeSchema returns the compiled schema of messageType at version: the
// StackUp catalog's (app/schemas) for v1; none for a version added with
// With, whose payload's Validate is its whole check.
func typeSchema(messageType, version string) (schemas.Message, bool, error) {
	if version != V1 {
		return schemas.Message{}, false, nil
	}
	cat, err := schemas.Default()
	if err != nil {
		return schemas.Message{}, false, err
	}
	m, ok := cat.Message("stackup", messageType)
	return m, ok, nil
}

// checkSchema checks env, payload included, against its type's schema in
// mode; a type and version without one passes.
func checkSchema(env envelope.Envelope, mode schemas.Mode) error {
	m, ok, err := typeSchema(env.MessageType, env.Version)
	if err != nil || !ok {
		return err
	}
	body, err := json.Marshal(env)
	if err != nil {
		return failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	return checkBody(env, m, body, mode)
}

func checkBody(env envelope.Envelope, m schemas.Message, body []byte, mode schemas.Mode) error {
	if err := m.Check(body, mode); err != nil {
		return failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	return nil
}

// checkV1 validates a v1 payload built in Go (a further version mapped to
// v1, Version.AsV1) as if it had arrived in env: the v1 schema, then p's
// Go rules.
func checkV1(env envelope.Envelope, p Payload) error {
	raw, err := json.Marshal(arraysNotNull(p))
	if err != nil {
		return err
	}
	env.Version, env.Payload = V1, raw
	if err := checkSchema(env, schemas.Lenient); err != nil {
		return err
	}
	return p.Validate(env)
}

// ValidateStrict checks an encoded envelope the way a publisher of ours
// must write it: a strict envelope (envelope.DecodeStrict), a known type and
// version, a payload the type's strict schema accepts (no unknown fields)
// and its Go rules accept, and no field the §5.2 secrets rule forbids,
// anywhere.
func (c Catalog) ValidateStrict(data []byte) error {
	if err := CheckNoSecrets(data); err != nil {
		return err
	}
	env, err := envelope.DecodeStrict(data)
	if err != nil {
		return err
	}
	_, s, err := c.Schema(env.MessageType, env.Version)
	if err != nil {
		return err
	}
	m, ok, err := typeSchema(env.MessageType, env.Version)
	if err != nil {
		return err
	}
	p := s.New()
	if ok {
		if err := checkBody(env, m, data, schemas.Strict); err != nil {
			return err
		}
		err = json.Unmarshal(env.Payload, p)
	} else {
		dec := json.NewDecoder(bytes.NewReader(env.Payload))
		dec.DisallowUnknownFields()
		err = dec.Decode(p)
	}
	if err != nil {
		return failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	if err := p.Validate(env); err != nil {
		return failure.AsPermanent(&PayloadError{MessageType: env.MessageType, Version: env.Version, Err: err})
	}
	return nil
}

// Outgoing is one message of ours to publish.
type Outgoing struct {
	Type      string
	Version   string // V1 when empty
	Publisher string
	Payload   Payload
	Context   envelope.Context
	// TraceID continues the request's trace; a new one when empty.
	TraceID string
	// CorrelationID is the request's messageId, on a callback (§3).
	CorrelationID string
	// Now stamps publishedAt; time.Now when zero.
	Now time.Time
}

// Encode builds the envelope of o (a new UUID v4 messageId), checks it with
// ValidateStrict and returns the message and the topic to publish it to
// ("<exchange>/<messageType>").
func (c Catalog) Encode(ctx context.Context, o Outgoing) (*message.Message, string, error) {
	t, ok := c.types[o.Type]
	if !ok {
		return nil, "", &UnknownTypeError{MessageType: o.Type}
	}
	if o.Version == "" {
		o.Version = V1
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.TraceID == "" {
		o.TraceID = newTraceID()
	}
	payload, err := json.Marshal(arraysNotNull(o.Payload))
	if err != nil {
		return nil, "", fmt.Errorf("encode %s payload: %w", o.Type, err)
	}
	env := envelope.Envelope{
		MessageID: envelope.NewID(), MessageType: o.Type, Version: o.Version, TraceID: o.TraceID,
		PublishedAt: envelope.Now(o.Now), Publisher: o.Publisher, Payload: payload, Context: o.Context,
	}
	body, err := json.Marshal(env)
	if err != nil {
		return nil, "", fmt.Errorf("encode %s: %w", o.Type, err)
	}
	if err := c.ValidateStrict(body); err != nil {
		return nil, "", fmt.Errorf("encode %s: refused: %w", o.Type, err)
	}
	msg, err := envelope.Marshal(ctx, env, o.CorrelationID)
	if err != nil {
		return nil, "", err
	}
	return msg, t.Topic(), nil
}

// SecretError is a field §5.2 forbids in an envelope ("envelope에는 비밀이
// 절대 포함되지 않는다"). Only the field's path is kept, never its value.
type SecretError struct{ Path string }

// Error implements error; it names the field, never its value.
func (e *SecretError) Error() string {
	return fmt.Sprintf("stackup envelope: field %s looks like a secret, which §5.2 forbids in an envelope", e.Path)
}

// secretWords are field-name fragments that name credentials. The spec's
// own retired field (githubAccessTokenEncrypted) is caught by "token".
var secretWords = []string{"token", "secret", "password", "passwd", "apikey", "api_key", "credential", "privatekey", "private_key"}

// IsSecretField reports whether a JSON key names a credential.
func IsSecretField(key string) bool {
	k := strings.ToLower(key)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// CheckNoSecrets walks a JSON document and returns a permanent *SecretError
// for the first key that names a credential. A document that does not
// decode is left to the decoder's error.
func CheckNoSecrets(data []byte) error {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	if p := findSecret(v, "$"); p != "" {
		return failure.AsPermanent(&SecretError{Path: p})
	}
	return nil
}

// SecretFields returns the paths of every key naming a credential (for a
// consumer's warning: the names are logged, the values never).
func SecretFields(data []byte) []string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	var out []string
	walkSecrets(v, "$", func(p string) { out = append(out, p) })
	return out
}

func findSecret(v any, path string) string {
	found := ""
	walkSecrets(v, path, func(p string) {
		if found == "" {
			found = p
		}
	})
	return found
}

func walkSecrets(v any, path string, hit func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := path + "." + k
			if IsSecretField(k) {
				hit(p)
			}
			walkSecrets(x[k], p, hit)
		}
	case []any:
		for i, e := range x {
			walkSecrets(e, fmt.Sprintf("%s[%d]", path, i), hit)
		}
	}
}

func newTraceID() string {
	return strings.ReplaceAll(envelope.NewID(), "-", "")
}

// arraysNotNull returns p, or a copy of it whose nil slices — in the
// payload and in the structs it holds — are empty: the contract's arrays are
// arrays, [] when empty, never null (the strict schema of our publishers
// refuses null), and a Go caller leaving a list unset means an empty one. A
// field tagged omitempty is left out either way.
func arraysNotNull(p any) any {
	v := reflect.ValueOf(p)
	if !v.IsValid() {
		return p
	}
	if out, changed := withArrays(v); changed {
		return out.Interface()
	}
	return p
}

// withArrays is arraysNotNull on v: a changed copy and true, or v and false.
func withArrays(v reflect.Value) (reflect.Value, bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v, false
		}
		elem, changed := withArrays(v.Elem())
		if !changed {
			return v, false
		}
		cp := reflect.New(elem.Type())
		cp.Elem().Set(elem)
		return cp, true
	case reflect.Struct:
		var cp reflect.Value
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				continue
			}
			f := v.Field(i)
			var nf reflect.Value
			switch {
			case f.Kind() == reflect.Slice && f.IsNil():
				nf = reflect.MakeSlice(f.Type(), 0, 0)
			default:
				var changed bool
				if nf, changed = withArrays(f); !changed {
					continue
				}
			}
			if !cp.IsValid() {
				cp = reflect.New(v.Type()).Elem()
				cp.Set(v)
			}
			cp.Field(i).Set(nf)
		}
		if !cp.IsValid() {
			return v, false
		}
		return cp, true
	case reflect.Slice:
		var cp reflect.Value
		for i := range v.Len() {
			e, changed := withArrays(v.Index(i))
			if !changed {
				continue
			}
			if !cp.IsValid() {
				cp = reflect.MakeSlice(v.Type(), v.Len(), v.Len())
				reflect.Copy(cp, v)
			}
			cp.Index(i).Set(e)
		}
		if !cp.IsValid() {
			return v, false
		}
		return cp, true
	}
	return v, false
}
