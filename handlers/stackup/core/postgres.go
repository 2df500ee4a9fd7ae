package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/eventpipe/eventpipe/app/dbtx"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
	"github.com/eventpipe/eventpipe/migrations"
)

// Postgres is the Store on PostgreSQL (migrations/00004_stackup.sql).
type Postgres struct {
	pool   *pgxpool.Pool
	schema string
}

var _ Store = (*Postgres)(nil)

// NewPostgres returns the store on schema (migrations.DefaultSchema when
// empty), which must be migrated.
func NewPostgres(pool *pgxpool.Pool, schema string) (*Postgres, error) {
	schema = migrations.SchemaOrDefault(schema)
	if err := migrations.ValidateSchema(schema); err != nil {
		return nil, fmt.Errorf("stackup store: %w", err)
	}
	return &Postgres{pool: pool, schema: schema}, nil
}

// Schema is the store's schema (its outbox lives there too).
func (p *Postgres) Schema() string { return p.schema }

func (p *Postgres) t(name string) string { return pgx.Identifier{p.schema, name}.Sanitize() }

// Atomically implements Store.
func (p *Postgres) Atomically(ctx context.Context, fn func(ctx context.Context) error) error {
	return dbtx.InTx(ctx, p.pool, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) })
}

func jsonOrNil(v any, isNil bool) ([]byte, error) {
	if isNil {
		return nil, nil
	}
	return json.Marshal(v)
}

func notFound(err error, what string, id int64) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s %d: %w", what, id, ErrNotFound)
	}
	return fmt.Errorf("%s %d: %w", what, id, err)
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// CreateDocument implements Store.
func (p *Postgres) CreateDocument(ctx context.Context, d Document) error {
	if d.Status == "" {
		d.Status = DocProcessing
	}
	tech, err := jsonOrNil(d.TechStack, d.TechStack == nil)
	if err != nil {
		return err
	}
	_, err = dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_analyzed_documents")+`
		(id, user_id, target_type, target_id, status, summary, tech_stack, document_path, embedding_chunk_count, error_code, error_message, retriable)
		VALUES ($1, NULLIF($2::bigint, 0), $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		d.ID, d.UserID, d.TargetType, d.TargetID, d.Status, nullString(d.Summary), tech, nullString(d.DocumentPath),
		d.EmbeddingChunkCount, nullString(d.ErrorCode), nullString(d.ErrorMessage), d.Retriable)
	if err != nil {
		return fmt.Errorf("create document %d: %w", d.ID, err)
	}
	return nil
}

const docColumns = `id, COALESCE(user_id, 0), target_type, target_id, status, summary, tech_stack, document_path,
	embedding_chunk_count, error_code, error_message, retriable`

func scanDocument(row pgx.Row) (Document, error) {
	var (
		d                              Document
		summary, path, errCode, errMsg *string
		tech                           []byte
	)
	if err := row.Scan(&d.ID, &d.UserID, &d.TargetType, &d.TargetID, &d.Status, &summary, &tech, &path,
		&d.EmbeddingChunkCount, &errCode, &errMsg, &d.Retriable); err != nil {
		return Document{}, err
	}
	d.Summary, d.DocumentPath, d.ErrorCode, d.ErrorMessage = deref(summary), deref(path), deref(errCode), deref(errMsg)
	if tech != nil {
		if err := json.Unmarshal(tech, &d.TechStack); err != nil {
			return Document{}, fmt.Errorf("document %d: tech_stack: %w", d.ID, err)
		}
	}
	return d, nil
}

// Document implements Store.
func (p *Postgres) Document(ctx context.Context, id int64) (Document, error) {
	d, err := scanDocument(dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT `+docColumns+` FROM `+p.t("stackup_analyzed_documents")+` WHERE id = $1`, id))
	if err != nil {
		return Document{}, notFound(err, "document", id)
	}
	return d, nil
}

// FinishAnalysis implements Store.
func (p *Postgres) FinishAnalysis(ctx context.Context, targetType string, targetID int64, r Document) ([]Document, error) {
	tech, err := jsonOrNil(r.TechStack, r.TechStack == nil)
	if err != nil {
		return nil, err
	}
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `UPDATE `+p.t("stackup_analyzed_documents")+`
		SET status = $3, summary = $4, tech_stack = $5, document_path = $6, embedding_chunk_count = $7,
		    error_code = $8, error_message = $9, retriable = $10, updated_at = now()
		WHERE target_type = $1 AND target_id = $2 AND status = 'PROCESSING'
		RETURNING `+docColumns,
		targetType, targetID, r.Status, nullString(r.Summary), tech, nullString(r.DocumentPath), r.EmbeddingChunkCount,
		nullString(r.ErrorCode), nullString(r.ErrorMessage), r.Retriable)
	if err != nil {
		return nil, fmt.Errorf("finish analysis %s %d: %w", targetType, targetID, err)
	}
	defer rows.Close()
	var out []Document
	for rows.Next() {
		d, err := scanDocument(rows)
		if err != nil {
			return nil, fmt.Errorf("finish analysis %s %d: %w", targetType, targetID, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("finish analysis %s %d: %w", targetType, targetID, err)
	}
	return out, nil
}

// CreateSession implements Store.
func (p *Postgres) CreateSession(ctx context.Context, s Session) error {
	pool, err := jsonOrNil(s.QuestionPool, s.QuestionPool == nil)
	if err != nil {
		return err
	}
	_, err = dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_interview_sessions")+`
		(id, user_id, question_pool, feedback_attempt_id, feedback_failed_at, feedback_fail_retriable)
		VALUES ($1, NULLIF($2::bigint, 0), $3, $4, $5, $6)`,
		s.ID, s.UserID, pool, s.FeedbackAttemptID, s.FeedbackFailedAt, s.FeedbackFailRetriable)
	if err != nil {
		return fmt.Errorf("create session %d: %w", s.ID, err)
	}
	return nil
}

// Session implements Store.
func (p *Postgres) Session(ctx context.Context, id int64) (Session, error) {
	var (
		s    Session
		pool []byte
	)
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT id, COALESCE(user_id, 0), question_pool, feedback_attempt_id, feedback_failed_at, feedback_fail_retriable
		FROM `+p.t("stackup_interview_sessions")+` WHERE id = $1`, id).
		Scan(&s.ID, &s.UserID, &pool, &s.FeedbackAttemptID, &s.FeedbackFailedAt, &s.FeedbackFailRetriable)
	if err != nil {
		return Session{}, notFound(err, "session", id)
	}
	if pool != nil {
		if err := json.Unmarshal(pool, &s.QuestionPool); err != nil {
			return Session{}, fmt.Errorf("session %d: question_pool: %w", id, err)
		}
	}
	if s.FeedbackFailedAt != nil {
		t := s.FeedbackFailedAt.UTC()
		s.FeedbackFailedAt = &t
	}
	return s, nil
}

func (p *Postgres) execOne(ctx context.Context, what string, id int64, sql string, args ...any) error {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s %d: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s %d: %w", what, id, ErrNotFound)
	}
	return nil
}

// SetQuestionPool implements Store.
func (p *Postgres) SetQuestionPool(ctx context.Context, sessionID int64, pool []catalog.Question) error {
	if pool == nil {
		pool = []catalog.Question{}
	}
	b, err := json.Marshal(pool)
	if err != nil {
		return err
	}
	return p.execOne(ctx, "set question pool of session", sessionID,
		`UPDATE `+p.t("stackup_interview_sessions")+` SET question_pool = $2, updated_at = now() WHERE id = $1`, sessionID, b)
}

// StartFeedbackAttempt implements Store.
func (p *Postgres) StartFeedbackAttempt(ctx context.Context, sessionID int64, attemptID string) error {
	return p.execOne(ctx, "start feedback attempt of session", sessionID,
		`UPDATE `+p.t("stackup_interview_sessions")+`
		SET feedback_attempt_id = $2, feedback_failed_at = NULL, feedback_fail_retriable = NULL, updated_at = now() WHERE id = $1`,
		sessionID, attemptID)
}

// MarkFeedbackFailed implements Store.
func (p *Postgres) MarkFeedbackFailed(ctx context.Context, sessionID int64, retriable bool, at time.Time) error {
	return p.execOne(ctx, "mark feedback failed of session", sessionID,
		`UPDATE `+p.t("stackup_interview_sessions")+`
		SET feedback_failed_at = $2, feedback_fail_retriable = $3, updated_at = now() WHERE id = $1`,
		sessionID, at.UTC().Truncate(time.Microsecond), retriable)
}

// SaveFeedback implements Store.
func (p *Postgres) SaveFeedback(ctx context.Context, f Feedback) (bool, error) {
	inserted := false
	err := p.Atomically(ctx, func(ctx context.Context) error {
		tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_session_feedbacks")+`
			(session_id, attempt_id, feedback, report_file_path) VALUES ($1, $2, $3, $4)
			ON CONFLICT (session_id) DO NOTHING`, f.SessionID, f.AttemptID, []byte(f.Feedback), f.ReportFilePath)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23503" {
				return fmt.Errorf("save feedback: session %d: %w", f.SessionID, ErrNotFound)
			}
			return fmt.Errorf("save feedback of session %d: %w", f.SessionID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil
		}
		inserted = true
		return p.execOne(ctx, "clear feedback failure of session", f.SessionID,
			`UPDATE `+p.t("stackup_interview_sessions")+`
			SET feedback_failed_at = NULL, feedback_fail_retriable = NULL, updated_at = now() WHERE id = $1`, f.SessionID)
	})
	return inserted, err
}

// Feedback implements Store.
func (p *Postgres) Feedback(ctx context.Context, sessionID int64) (Feedback, error) {
	var f Feedback
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT session_id, attempt_id, feedback, report_file_path
		FROM `+p.t("stackup_session_feedbacks")+` WHERE session_id = $1`, sessionID).
		Scan(&f.SessionID, &f.AttemptID, &f.Feedback, &f.ReportFilePath)
	if err != nil {
		return Feedback{}, notFound(err, "feedback of session", sessionID)
	}
	return f, nil
}

// CreateMessage implements Store.
func (p *Postgres) CreateMessage(ctx context.Context, m Message) error {
	if m.Status == "" {
		m.Status = MsgNormal
	}
	eval, err := jsonOrNil(m.AnswerEvaluation, m.AnswerEvaluation == nil)
	if err != nil {
		return err
	}
	metrics, err := jsonOrNil(m.VoiceMetrics, m.VoiceMetrics == nil)
	if err != nil {
		return err
	}
	_, err = dbtx.Q(ctx, p.pool).Exec(ctx, `INSERT INTO `+p.t("stackup_interview_messages")+`
		(id, session_id, role, content, status, answer_intent, answer_evaluation, tts_status, audio_key, audio_duration_sec,
		 tts_error_code, voice_metrics, voice_error_code)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		m.ID, m.SessionID, m.Role, m.Content, m.Status, nullString(m.AnswerIntent), eval, nullString(m.TTSStatus), m.AudioKey,
		m.AudioDurationSec, nullString(m.TTSErrorCode), metrics, nullString(m.VoiceErrorCode))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			return fmt.Errorf("create message %d: session %d: %w", m.ID, m.SessionID, ErrNotFound)
		}
		return fmt.Errorf("create message %d: %w", m.ID, err)
	}
	return nil
}

// AppendMessage implements Store. Ids are assigned one at a time: a
// transaction-scoped advisory lock (keyed by the table) orders the
// appenders, so two never take the same id; it is held until the
// transaction ctx carries ends.
func (p *Postgres) AppendMessage(ctx context.Context, m Message) (Message, error) {
	table := p.t("stackup_interview_messages")
	if m.Status == "" {
		m.Status = MsgNormal
	}
	err := dbtx.InTx(ctx, p.pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, table); err != nil {
			return fmt.Errorf("append message: lock: %w", err)
		}
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) + 1 FROM `+table).Scan(&m.ID); err != nil {
			return fmt.Errorf("append message: %w", err)
		}
		return p.CreateMessage(ctx, m)
	})
	if err != nil {
		return Message{}, err
	}
	return m, nil
}

// SessionMessages implements Store.
func (p *Postgres) SessionMessages(ctx context.Context, sessionID int64) ([]Message, error) {
	rows, err := dbtx.Q(ctx, p.pool).Query(ctx, `SELECT id FROM `+p.t("stackup_interview_messages")+` WHERE session_id = $1 ORDER BY id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("session %d messages: %w", sessionID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("session %d messages: %w", sessionID, err)
	}
	out := make([]Message, 0, len(ids))
	for _, id := range ids {
		m, err := p.Message(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Message implements Store. The row is locked (FOR UPDATE) until the
// transaction ctx carries ends: callbacks update a message by reading it whole
// and writing it back (UpdateMessage), and two of them on one message at once
// (the follow-up's answer evaluation, the voice transcript) would otherwise
// lose one of the two writes.
func (p *Postgres) Message(ctx context.Context, id int64) (Message, error) {
	var (
		m                                   Message
		intent, ttsStatus, ttsErr, voiceErr *string
		eval, metrics                       []byte
	)
	err := dbtx.Q(ctx, p.pool).QueryRow(ctx, `SELECT id, session_id, role, content, status, answer_intent, answer_evaluation, tts_status,
		audio_key, audio_duration_sec, tts_error_code, voice_metrics, voice_error_code
		FROM `+p.t("stackup_interview_messages")+` WHERE id = $1 FOR UPDATE`, id).
		Scan(&m.ID, &m.SessionID, &m.Role, &m.Content, &m.Status, &intent, &eval, &ttsStatus, &m.AudioKey, &m.AudioDurationSec,
			&ttsErr, &metrics, &voiceErr)
	if err != nil {
		return Message{}, notFound(err, "message", id)
	}
	m.AnswerIntent, m.TTSStatus, m.TTSErrorCode, m.VoiceErrorCode = deref(intent), deref(ttsStatus), deref(ttsErr), deref(voiceErr)
	if eval != nil {
		m.AnswerEvaluation = &catalog.AnswerEvaluation{}
		if err := json.Unmarshal(eval, m.AnswerEvaluation); err != nil {
			return Message{}, fmt.Errorf("message %d: answer_evaluation: %w", id, err)
		}
	}
	if metrics != nil {
		m.VoiceMetrics = &VoiceMetrics{}
		if err := json.Unmarshal(metrics, m.VoiceMetrics); err != nil {
			return Message{}, fmt.Errorf("message %d: voice_metrics: %w", id, err)
		}
	}
	return m, nil
}

// UpdateMessage implements Store.
func (p *Postgres) UpdateMessage(ctx context.Context, m Message) error {
	eval, err := jsonOrNil(m.AnswerEvaluation, m.AnswerEvaluation == nil)
	if err != nil {
		return err
	}
	metrics, err := jsonOrNil(m.VoiceMetrics, m.VoiceMetrics == nil)
	if err != nil {
		return err
	}
	return p.execOne(ctx, "update message", m.ID, `UPDATE `+p.t("stackup_interview_messages")+`
		SET content = $2, status = $3, answer_intent = $4, answer_evaluation = $5, tts_status = $6, audio_key = $7,
		    audio_duration_sec = $8, tts_error_code = $9, voice_metrics = $10, voice_error_code = $11, updated_at = now()
		WHERE id = $1`,
		m.ID, m.Content, m.Status, nullString(m.AnswerIntent), eval, nullString(m.TTSStatus), m.AudioKey, m.AudioDurationSec,
		nullString(m.TTSErrorCode), metrics, nullString(m.VoiceErrorCode))
}

// DeleteMessage implements Store.
func (p *Postgres) DeleteMessage(ctx context.Context, id int64) (bool, error) {
	tag, err := dbtx.Q(ctx, p.pool).Exec(ctx, `DELETE FROM `+p.t("stackup_interview_messages")+` WHERE id = $1`, id)
	if err != nil {
		return false, fmt.Errorf("delete message %d: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}
