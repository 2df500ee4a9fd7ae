package core

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

// Memory is the in-process Store (the embedded mode and tests): Postgres's
// semantics without durability. Atomically holds one lock and restores a
// snapshot when fn fails, so a failed effect leaves nothing behind.
type Memory struct {
	mu        sync.Mutex
	docs      map[int64]Document
	sessions  map[int64]Session
	messages  map[int64]Message
	feedbacks map[int64]Feedback
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store.
func NewMemory() *Memory {
	return &Memory{docs: map[int64]Document{}, sessions: map[int64]Session{}, messages: map[int64]Message{}, feedbacks: map[int64]Feedback{}}
}

type memLocked struct{}

// lock takes the lock unless ctx is inside Atomically (which holds it).
func (m *Memory) lock(ctx context.Context) func() {
	if ctx.Value(memLocked{}) == m {
		return func() {}
	}
	m.mu.Lock()
	return m.mu.Unlock
}

// Atomically implements Store.
func (m *Memory) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	if ctx.Value(memLocked{}) == m {
		return fn(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	docs, sessions, messages, feedbacks := maps.Clone(m.docs), maps.Clone(m.sessions), maps.Clone(m.messages), maps.Clone(m.feedbacks)
	committed := false
	defer func() {
		if !committed {
			m.docs, m.sessions, m.messages, m.feedbacks = docs, sessions, messages, feedbacks
		}
	}()
	if err := fn(context.WithValue(ctx, memLocked{}, m)); err != nil {
		return err
	}
	committed = true
	return nil
}

// CreateDocument implements Store.
func (m *Memory) CreateDocument(ctx context.Context, d Document) error {
	defer m.lock(ctx)()
	if _, ok := m.docs[d.ID]; ok {
		return fmt.Errorf("create document %d: already exists", d.ID)
	}
	if d.Status == "" {
		d.Status = DocProcessing
	}
	d.TechStack = slices.Clone(d.TechStack)
	m.docs[d.ID] = d
	return nil
}

// Document implements Store.
func (m *Memory) Document(ctx context.Context, id int64) (Document, error) {
	defer m.lock(ctx)()
	d, ok := m.docs[id]
	if !ok {
		return Document{}, fmt.Errorf("document %d: %w", id, ErrNotFound)
	}
	return d, nil
}

// FinishAnalysis implements Store.
func (m *Memory) FinishAnalysis(ctx context.Context, targetType string, targetID int64, r Document) ([]Document, error) {
	defer m.lock(ctx)()
	var out []Document
	for _, id := range slices.Sorted(maps.Keys(m.docs)) {
		d := m.docs[id]
		if d.TargetType != targetType || d.TargetID != targetID || d.Status != DocProcessing {
			continue
		}
		d.Status, d.Summary, d.TechStack, d.DocumentPath = r.Status, r.Summary, slices.Clone(r.TechStack), r.DocumentPath
		d.EmbeddingChunkCount, d.ErrorCode, d.ErrorMessage, d.Retriable = r.EmbeddingChunkCount, r.ErrorCode, r.ErrorMessage, r.Retriable
		m.docs[id] = d
		out = append(out, d)
	}
	return out, nil
}

// CreateSession implements Store.
func (m *Memory) CreateSession(ctx context.Context, s Session) error {
	defer m.lock(ctx)()
	if _, ok := m.sessions[s.ID]; ok {
		return fmt.Errorf("create session %d: already exists", s.ID)
	}
	m.sessions[s.ID] = s
	return nil
}

// Session implements Store.
func (m *Memory) Session(ctx context.Context, id int64) (Session, error) {
	defer m.lock(ctx)()
	s, ok := m.sessions[id]
	if !ok {
		return Session{}, fmt.Errorf("session %d: %w", id, ErrNotFound)
	}
	return s, nil
}

func (m *Memory) updateSession(id int64, f func(*Session)) error {
	s, ok := m.sessions[id]
	if !ok {
		return fmt.Errorf("session %d: %w", id, ErrNotFound)
	}
	f(&s)
	m.sessions[id] = s
	return nil
}

// SetQuestionPool implements Store.
func (m *Memory) SetQuestionPool(ctx context.Context, sessionID int64, pool []catalog.Question) error {
	defer m.lock(ctx)()
	return m.updateSession(sessionID, func(s *Session) { s.QuestionPool = slices.Clone(pool) })
}

// StartFeedbackAttempt implements Store.
func (m *Memory) StartFeedbackAttempt(ctx context.Context, sessionID int64, attemptID string) error {
	defer m.lock(ctx)()
	return m.updateSession(sessionID, func(s *Session) {
		s.FeedbackAttemptID, s.FeedbackFailedAt, s.FeedbackFailRetriable = &attemptID, nil, nil
	})
}

// MarkFeedbackFailed implements Store.
func (m *Memory) MarkFeedbackFailed(ctx context.Context, sessionID int64, retriable bool, at time.Time) error {
	defer m.lock(ctx)()
	at = at.UTC().Truncate(time.Microsecond)
	return m.updateSession(sessionID, func(s *Session) { s.FeedbackFailedAt, s.FeedbackFailRetriable = &at, &retriable })
}

// SaveFeedback implements Store.
func (m *Memory) SaveFeedback(ctx context.Context, f Feedback) (bool, error) {
	defer m.lock(ctx)()
	if _, ok := m.sessions[f.SessionID]; !ok {
		return false, fmt.Errorf("save feedback: session %d: %w", f.SessionID, ErrNotFound)
	}
	if _, ok := m.feedbacks[f.SessionID]; ok {
		return false, nil
	}
	m.feedbacks[f.SessionID] = f
	return true, m.updateSession(f.SessionID, func(s *Session) { s.FeedbackFailedAt, s.FeedbackFailRetriable = nil, nil })
}

// Feedback implements Store.
func (m *Memory) Feedback(ctx context.Context, sessionID int64) (Feedback, error) {
	defer m.lock(ctx)()
	f, ok := m.feedbacks[sessionID]
	if !ok {
		return Feedback{}, fmt.Errorf("feedback of session %d: %w", sessionID, ErrNotFound)
	}
	return f, nil
}

// CreateMessage implements Store.
func (m *Memory) CreateMessage(ctx context.Context, msg Message) error {
	defer m.lock(ctx)()
	if _, ok := m.sessions[msg.SessionID]; !ok {
		return fmt.Errorf("create message %d: session %d: %w", msg.ID, msg.SessionID, ErrNotFound)
	}
	if _, ok := m.messages[msg.ID]; ok {
		return fmt.Errorf("create message %d: already exists", msg.ID)
	}
	if msg.Status == "" {
		msg.Status = MsgNormal
	}
	m.messages[msg.ID] = msg
	return nil
}

// AppendMessage implements Store.
func (m *Memory) AppendMessage(ctx context.Context, msg Message) (Message, error) {
	defer m.lock(ctx)()
	msg.ID = 1
	for id := range m.messages {
		msg.ID = max(msg.ID, id+1)
	}
	if _, ok := m.sessions[msg.SessionID]; !ok {
		return Message{}, fmt.Errorf("append message: session %d: %w", msg.SessionID, ErrNotFound)
	}
	if msg.Status == "" {
		msg.Status = MsgNormal
	}
	m.messages[msg.ID] = msg
	return msg, nil
}

// SessionMessages implements Store.
func (m *Memory) SessionMessages(ctx context.Context, sessionID int64) ([]Message, error) {
	defer m.lock(ctx)()
	var out []Message
	for _, id := range slices.Sorted(maps.Keys(m.messages)) {
		if msg := m.messages[id]; msg.SessionID == sessionID {
			out = append(out, msg)
		}
	}
	return out, nil
}

// Message implements Store.
func (m *Memory) Message(ctx context.Context, id int64) (Message, error) {
	defer m.lock(ctx)()
	msg, ok := m.messages[id]
	if !ok {
		return Message{}, fmt.Errorf("message %d: %w", id, ErrNotFound)
	}
	return msg, nil
}

// UpdateMessage implements Store.
func (m *Memory) UpdateMessage(ctx context.Context, msg Message) error {
	defer m.lock(ctx)()
	old, ok := m.messages[msg.ID]
	if !ok {
		return fmt.Errorf("update message %d: %w", msg.ID, ErrNotFound)
	}
	msg.SessionID, msg.Role = old.SessionID, old.Role
	m.messages[msg.ID] = msg
	return nil
}

// DeleteMessage implements Store.
func (m *Memory) DeleteMessage(ctx context.Context, id int64) (bool, error) {
	defer m.lock(ctx)()
	_, ok := m.messages[id]
	delete(m.messages, id)
	return ok, nil
}
