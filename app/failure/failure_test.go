package failure_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/eventpipe/eventpipe/app/failure"
)

func TestOf(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	cases := map[string]struct {
		err  error
		want failure.Class
	}{
		"unmarked is transient":    {base, failure.Transient},
		"nil is transient":         {nil, failure.Transient},
		"permanent":                {failure.AsPermanent(base), failure.Permanent},
		"permanent wrapped":        {fmt.Errorf("decode: %w", failure.AsPermanent(base)), failure.Permanent},
		"permanentf":               {failure.Permanentf("bad %q: %w", "x", base), failure.Permanent},
		"duplicate":                {failure.AsDuplicate(base), failure.Duplicate},
		"transient":                {failure.AsTransient(base, 0), failure.Transient},
		"outermost marker wins":    {failure.AsTransient(failure.AsPermanent(base), 0), failure.Transient},
		"outermost permanent wins": {failure.AsPermanent(failure.AsTransient(base, time.Second)), failure.Permanent},
		"duplicate wrapped":        {fmt.Errorf("x: %w", failure.AsDuplicate(base)), failure.Duplicate},
	}
	for name, c := range cases {
		assert.Equal(t, c.want, failure.Of(c.err), name)
	}
	assert.Nil(t, failure.AsPermanent(nil))
	assert.Nil(t, failure.AsTransient(nil, time.Second))
	assert.Nil(t, failure.AsDuplicate(nil))
}

func TestRetryAfterAndMessages(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("call model: %w", failure.AsTransient(errors.New("429 Too Many Requests"), 3*time.Second))
	assert.Equal(t, 3*time.Second, failure.RetryAfter(err))
	assert.Equal(t, time.Duration(0), failure.RetryAfter(errors.New("x")))
	assert.Equal(t, "call model: transient (retry after 3s): 429 Too Many Requests", err.Error())
	assert.Equal(t, "permanent: x", failure.AsPermanent(errors.New("x")).Error())
	assert.Equal(t, "duplicate: x", failure.AsDuplicate(errors.New("x")).Error())
	assert.ErrorIs(t, err, errors.Unwrap(errors.Unwrap(err)))
	assert.Equal(t, "permanent", failure.Permanent.String())
	assert.Equal(t, "transient", failure.Transient.String())
	assert.Equal(t, "duplicate", failure.Duplicate.String())
}
