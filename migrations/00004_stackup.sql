-- The StackUp contract's Core state (the StackUp RabbitMQ messaging contract,
-- §5): the analysed documents the analysis callbacks finish, interview
-- sessions with their question pool and feedback attempt, interview messages
-- (placeholders the follow-up, TTS and voice callbacks complete) and session
-- feedback. See handlers/stackup/core. Names carry a stackup_ prefix: these
-- are a model of Core's tables, not Core's own schema.

-- +goose Up
CREATE TABLE stackup_analyzed_documents (
    id                    bigint      PRIMARY KEY,
    user_id               bigint,
    -- RESUME, REPOSITORY, WEB or COVER_LETTER (our extension) and the id of
    -- that resume / repository / cover letter: what callback.analysis names.
    target_type           text        NOT NULL CHECK (target_type IN ('RESUME', 'REPOSITORY', 'WEB', 'COVER_LETTER')),
    target_id             bigint      NOT NULL,
    -- PROCESSING from the request (created before it is published, §5.1)
    -- until the callback: ANALYZED or FAILED.
    status                text        NOT NULL DEFAULT 'PROCESSING' CHECK (status IN ('PROCESSING', 'ANALYZED', 'FAILED')),
    summary               text,
    tech_stack            jsonb,
    document_path         text,
    embedding_chunk_count integer,
    error_code            text,
    error_message         text,
    retriable             boolean,
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stackup_analyzed_documents_target_idx ON stackup_analyzed_documents (target_type, target_id, status);

CREATE TABLE stackup_interview_sessions (
    id                      bigint      PRIMARY KEY,
    user_id                 bigint,
    -- The generated pool (callback.questions kind POOL); NULL until then.
    question_pool           jsonb,
    -- The current generate.feedback attempt (§5.10 V30); a FAILED feedback
    -- callback for another attempt is dropped.
    feedback_attempt_id     text,
    -- The failure marker (§5.11 V29): set by a FAILED feedback callback,
    -- cleared by a success or a new attempt.
    feedback_failed_at      timestamptz,
    feedback_fail_retriable boolean,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE stackup_interview_messages (
    id                  bigint      PRIMARY KEY,
    session_id          bigint      NOT NULL REFERENCES stackup_interview_sessions (id),
    role                text        NOT NULL CHECK (role IN ('INTERVIEWER', 'INTERVIEWEE')),
    content             text        NOT NULL DEFAULT '',
    -- NORMAL, PENDING (a placeholder "(생성 중)" or an answer awaiting STT)
    -- or FAILED.
    status              text        NOT NULL DEFAULT 'NORMAL' CHECK (status IN ('NORMAL', 'PENDING', 'FAILED')),
    answer_intent       text,
    answer_evaluation   jsonb,
    tts_status          text        CHECK (tts_status IN ('SUCCEEDED', 'FAILED')),
    audio_key           text,
    audio_duration_sec  double precision,
    tts_error_code      text,
    voice_metrics       jsonb,
    voice_error_code    text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX stackup_interview_messages_session_idx ON stackup_interview_messages (session_id);

CREATE TABLE stackup_session_feedbacks (
    -- One feedback per session (§5.11: "중복은 session_feedbacks UNIQUE 가
    -- 처리").
    session_id         bigint      PRIMARY KEY REFERENCES stackup_interview_sessions (id),
    attempt_id         text,
    feedback           jsonb       NOT NULL,
    report_file_path   text,
    created_at         timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE stackup_session_feedbacks;
DROP TABLE stackup_interview_messages;
DROP TABLE stackup_interview_sessions;
DROP TABLE stackup_analyzed_documents;
