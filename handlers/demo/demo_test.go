package demo_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
	"github.com/eventpipe/eventpipe/app/msgctx"
	"github.com/eventpipe/eventpipe/handlers/demo"
)

func TestValidateGreeting(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		body string
		ok   bool
	}{
		"valid":         {`{"name":"Ada"}`, true},
		"non-ascii":     {`{"name":"세종"}`, true},
		"missing name":  {`{}`, false},
		"blank name":    {`{"name":"   "}`, false},
		"wrong type":    {`{"name":7}`, false},
		"unknown field": {`{"name":"Ada","token":"s3cret"}`, false},
		"not json":      {`name=Ada`, false},
		"null":          {`null`, false},
		"array":         {`["Ada"]`, false},
		"trailing data": {`{"name":"Ada"} {"name":"Bob"}`, false},
		"name too long": {`{"name":"` + strings.Repeat("x", 101) + `"}`, false},
		"name at limit": {`{"name":"` + strings.Repeat("é", 100) + `"}`, true},
		"empty body":    {``, false},
	}
	for name, c := range cases {
		err := demo.ValidateGreeting([]byte(c.body))
		if c.ok {
			assert.NoError(t, err, name)
		} else {
			assert.Error(t, err, name)
		}
	}
}

// The greet handler is lenient on consume (unknown fields ignored), rejects a
// greeting without a name, and answers on the greeted queue with the trace id.
func TestGreetPublishesGreetedWithTrace(t *testing.T) {
	t.Parallel()
	pub := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, watermill.NopLogger{})
	defer pub.Close()
	routes := demo.Handlers{Publisher: pub, Logger: slog.New(slog.DiscardHandler)}.Routes()
	greet, err := routes.ByQueue(demo.GreetingsQueue)
	require.NoError(t, err)

	in := message.NewMessage(watermill.NewUUID(), []byte(`{"name":" Ada ","extra":true}`))
	in.SetContext(msgctx.WithTraceID(context.Background(), "trace-7"))
	require.NoError(t, greet.Handle(in))

	bad := message.NewMessage(watermill.NewUUID(), []byte(`{"name":""}`))
	require.Error(t, greet.Handle(bad))
	require.Error(t, greet.Handle(message.NewMessage(watermill.NewUUID(), []byte(`{`))))

	msgs, err := pub.Subscribe(context.Background(), demo.GreetedQueue)
	require.NoError(t, err)
	select {
	case out := <-msgs:
		var g demo.Greeted
		require.NoError(t, json.Unmarshal(out.Payload, &g))
		assert.Equal(t, "hello, Ada", g.Text)
		assert.Equal(t, "trace-7", out.Metadata.Get(metadata.TraceIDKey))
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no greeted message")
	}
	_, err = routes.ByQueue("nope")
	assert.ErrorContains(t, err, demo.GreetingsQueue)
}
