package llmgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/llm"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker"
	"github.com/eventpipe/eventpipe/handlers/stackup/aiworker/llmgen"
	"github.com/eventpipe/eventpipe/handlers/stackup/catalog"
)

type fakeLLM struct {
	content string
	err     error
	got     llm.Request
}

func (f *fakeLLM) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	f.got = req
	if f.err != nil {
		return llm.Response{}, f.err
	}
	return llm.Response{Content: json.RawMessage(f.content), PromptVersion: req.PromptVersion}, nil
}

func TestSchemasAreValidJSON(t *testing.T) {
	t.Parallel()
	f := &fakeLLM{content: `{"questions":[{"category":"C","question":"Q?","jobCategory":null,"targetEvidence":"","expectedSignal":"s"}]}`}
	qs, err := llmgen.Generator{Client: f}.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1, Mode: "TECHNICAL"})
	require.NoError(t, err)
	assert.Equal(t, "Q?", qs[0].Question)
	assert.True(t, json.Valid(f.got.Schema.JSON))
	assert.True(t, f.got.Schema.Strict)
	assert.Equal(t, llmgen.PromptVersion, f.got.PromptVersion)

	f = &fakeLLM{content: `{"answerIntent":"DONT_KNOW","followupQuestion":"","answerEvaluation":{"specificity":null,"logic":null,"structure":null,"correctness":null}}`}
	fu, err := llmgen.Generator{Client: f}.GenerateFollowup(context.Background(), aiworker.Job{}, &catalog.GenerateFollowupV1{SessionID: 1})
	require.NoError(t, err)
	assert.Equal(t, catalog.IntentDontKnow, fu.AnswerIntent)
	assert.True(t, json.Valid(f.got.Schema.JSON))

	f = &fakeLLM{content: `{"overallScore":70,"technicalAccuracy":70,"logicScore":70,"communicationScore":70,"strengthsSummary":"a","weaknessesSummary":"b","improvementKeywords":[],"studyPlan":[],"highlights":["a"],"answerCoaching":[],"panelBreakdown":[]}`}
	fb, err := llmgen.Generator{Client: f}.GenerateFeedback(context.Background(), aiworker.Job{}, &catalog.GenerateFeedbackV1{SessionID: 1})
	require.NoError(t, err)
	assert.Equal(t, 70.0, *fb.OverallScore)
	assert.True(t, json.Valid(f.got.Schema.JSON))
}

func TestErrorsClassified(t *testing.T) {
	t.Parallel()
	g := llmgen.Generator{Client: &fakeLLM{content: `{"questions":[{"category":"C","question":" ","jobCategory":null,"targetEvidence":"","expectedSignal":""}]}`}}
	_, err := g.GenerateQuestions(context.Background(), aiworker.Job{}, &catalog.GenerateQuestionsV1{SessionID: 1})
	assert.Equal(t, catalog.ErrGenerationSchemaInvalid, aiworker.Signal(catalog.GenerateQuestions, err).Code)

	g = llmgen.Generator{Client: &fakeLLM{err: failure.AsPermanent(fmt.Errorf("%w: refused", llm.ErrInvalidOutput))}}
	_, err = g.GenerateFollowup(context.Background(), aiworker.Job{}, &catalog.GenerateFollowupV1{SessionID: 1})
	assert.ErrorIs(t, err, aiworker.ErrSchemaInvalid)

	outage := failure.AsTransient(&llm.APIError{StatusCode: 503}, 0)
	g = llmgen.Generator{Client: &fakeLLM{err: outage}}
	_, err = g.GenerateFeedback(context.Background(), aiworker.Job{}, &catalog.GenerateFeedbackV1{SessionID: 1})
	assert.Equal(t, failure.Transient, failure.Of(err), "an outage stays transient: retried in process")
	var api *llm.APIError
	assert.True(t, errors.As(err, &api))
}
