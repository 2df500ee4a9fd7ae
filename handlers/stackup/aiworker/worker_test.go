package aiworker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/inbox"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

func TestSignal(t *testing.T) {
	t.Parallel()
	domain := &aiworker.DomainError{Type: "ResumeAnalyzeError", Code: "PDF_PARSE_FAILED", Err: errors.New("no text layer")}
	apiErr := &llm.APIError{StatusCode: 503, Message: "overloaded"}
	cases := []struct {
		name, messageType string
		err               error
		code              string
		retriable         bool
		message           string
	}{
		{"domain error keeps its code", catalog.AnalyzeResume, fmt.Errorf("analyze: %w", domain), "PDF_PARSE_FAILED", false, "ResumeAnalyzeError: analyze: ResumeAnalyzeError (PDF_PARSE_FAILED): no text layer"},
		{"schema invalid", catalog.GenerateQuestions, fmt.Errorf("decode: %w", aiworker.ErrSchemaInvalid), catalog.ErrGenerationSchemaInvalid, false, "Error: decode: generation output does not match the schema"},
		{"llm invalid output", catalog.GenerateFeedback, failure.AsPermanent(fmt.Errorf("%w: truncated", llm.ErrInvalidOutput)), catalog.ErrGenerationSchemaInvalid, false, ""},
		{"llm outage, questions", catalog.GenerateQuestions, failure.AsTransient(apiErr, 0), catalog.ErrGenerationFailed, true, "APIError: transient: HTTP 503: overloaded"},
		{"permanent llm error, followup", catalog.GenerateFollowup, failure.AsPermanent(&llm.APIError{StatusCode: 401}), catalog.ErrGenerationFailed, false, ""},
		{"feedback is UNEXPECTED", catalog.GenerateFeedback, errors.New("boom"), catalog.ErrUnexpected, true, "Error: boom"},
		{"analysis, unclassified", catalog.AnalyzeWeb, errors.New("boom"), catalog.ErrUnexpected, true, ""},
	}
	for _, c := range cases {
		sig := aiworker.Signal(c.messageType, c.err)
		assert.Equal(t, c.code, sig.Code, c.name)
		assert.Equal(t, c.retriable, sig.Retriable, c.name)
		if c.message != "" {
			assert.Equal(t, c.message, sig.Message, c.name)
		}
	}
}

func TestErrorMessageCappedAt500Characters(t *testing.T) {
	t.Parallel()
	msg := aiworker.ErrorMessage(errors.New(strings.Repeat("가", 1000)))
	assert.Equal(t, 500, utf8.RuneCountInString(msg))
	assert.True(t, utf8.ValidString(msg))
	assert.True(t, strings.HasPrefix(msg, "Error: 가"))
	assert.Empty(t, aiworker.ErrorMessage(nil))
}

func TestWorkerRefusesToStartWithoutItsProcessor(t *testing.T) {
	t.Parallel()
	top, err := stackup.LoadTopology("../../../" + stackup.TopologyFile)
	require.NoError(t, err)
	procs := aiworker.SampleProcessors()
	procs.Questions = nil
	_, err = aiworker.New(aiworker.Config{Catalog: catalog.Default(), Topology: top, Publisher: nopPublisher{}, Inbox: inbox.NewMemory(), Processors: procs})
	require.ErrorIs(t, err, catalog.ErrNotConfigured)
	assert.ErrorContains(t, err, "queue ai.generate.questions: the generate.questions processor is not configured")

	w, err := aiworker.New(aiworker.Config{Catalog: catalog.Default(), Topology: top, Publisher: nopPublisher{}, Inbox: inbox.NewMemory(),
		Processors: procs, Queues: []string{"ai.analyze.resume", "ai.generate.tts"}})
	require.NoError(t, err, "a queue left out needs no processor")
	routes, err := w.Routes()
	require.NoError(t, err)
	assert.Equal(t, []string{"ai.analyze.resume", "ai.generate.tts"}, routes.Queues())
	assert.Equal(t, "dlq.ai.generate.tts", routes[1].Policy.DeadLetterQueue)

	_, err = aiworker.New(aiworker.Config{Catalog: catalog.Default(), Topology: top, Publisher: nopPublisher{}, Inbox: inbox.NewMemory(),
		Processors: procs, Queues: []string{"core.callback.analysis"}})
	require.ErrorContains(t, err, "not a request queue")
}
