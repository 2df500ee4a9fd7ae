package sqs

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/metadata"
)

func TestNackVisibility(t *testing.T) {
	t.Parallel()
	const def = 7 * time.Second
	for raw, want := range map[string]int32{
		"":          7, // absent: the configured NackVisibility
		"2s":        2,
		"1.5s":      2, // rounded up
		"1ns":       1,
		"999ms":     1,
		"1s":        1,
		"0s":        0,
		"-3s":       0,
		"12h":       43200,
		"12h0m1s":   43200, // clamped
		"100000h":   43200,
		"garbage":   7, // unparsable: the configured value
		"2540400h1": 7,
	} {
		explicit := message.NewMessage("u", nil)
		explicit.Metadata.Set(metadata.ExplicitNackDelayKey, "true")
		if raw != "" {
			explicit.Metadata.Set(metadata.NackDelayKey, raw)
		}
		got, change := nackVisibility(explicit, def)
		assert.True(t, change, "%q", raw)
		assert.Equal(t, want, got, "explicit %q", raw)
	}

	// The queue's timing: without the explicit mark the retry middleware's
	// backoff changes nothing, and nor does an explicit mark without a delay.
	for name, md := range map[string]message.Metadata{
		"nothing":                     {},
		"a backoff, not explicit":     {metadata.NackDelayKey: "0s"},
		"explicit false":              {metadata.NackDelayKey: "1s", metadata.ExplicitNackDelayKey: "false"},
		"explicit without a delay":    {metadata.ExplicitNackDelayKey: "true"},
		"explicit with garbage":       {metadata.NackDelayKey: "soon", metadata.ExplicitNackDelayKey: "true"},
		"explicit mark not a boolean": {metadata.NackDelayKey: "1s", metadata.ExplicitNackDelayKey: "yes please"},
	} {
		msg := message.NewMessage("u", nil)
		msg.Metadata = md
		_, change := nackVisibility(msg, 0)
		assert.False(t, change, name)
		got, change := nackVisibility(msg, def)
		assert.True(t, change, "%s with a configured NackVisibility", name)
		assert.Equal(t, int32(7), got, "%s with a configured NackVisibility", name)
	}
}

func TestSetDeliveryMetadata(t *testing.T) {
	t.Parallel()
	forged := func() message.Metadata {
		return message.Metadata{
			"keep":                        "v",
			metadata.AttemptKey:           "9",
			metadata.FirstFailureKey:      "2000-01-01T00:00:00Z",
			metadata.NackDelayKey:         "1h",
			metadata.ExplicitNackDelayKey: "true",
			ReceiveCountKey:               "9",
		}
	}
	first := forged()
	setDeliveryMetadata(first, map[string]string{
		"ApproximateReceiveCount":          "1",
		"ApproximateFirstReceiveTimestamp": "1700000000123",
	})
	assert.Equal(t, message.Metadata{"keep": "v", metadata.AttemptKey: "0", ReceiveCountKey: "1"}, first)

	again := forged()
	setDeliveryMetadata(again, map[string]string{
		"ApproximateReceiveCount":          "3",
		"ApproximateFirstReceiveTimestamp": "1700000000123",
	})
	assert.Equal(t, message.Metadata{
		"keep":                   "v",
		metadata.AttemptKey:      "2",
		ReceiveCountKey:          "3",
		metadata.FirstFailureKey: "2023-11-14T22:13:20.123Z",
	}, again)

	fifo := forged()
	fifo[metadata.GroupIDKey] = "forged"
	setDeliveryMetadata(fifo, map[string]string{"ApproximateReceiveCount": "1", "MessageGroupId": "bks_1"})
	assert.Equal(t, message.Metadata{"keep": "v", metadata.AttemptKey: "0", ReceiveCountKey: "1", metadata.GroupIDKey: "bks_1"}, fifo,
		"the group SQS delivered it in")

	noTimestamp := forged()
	setDeliveryMetadata(noTimestamp, map[string]string{"ApproximateReceiveCount": "2"})
	assert.Equal(t, message.Metadata{"keep": "v", metadata.AttemptKey: "1", ReceiveCountKey: "2"}, noTimestamp)

	nothing := forged()
	setDeliveryMetadata(nothing, nil)
	assert.Equal(t, message.Metadata{"keep": "v", metadata.AttemptKey: "0"}, nothing)
}

func TestBatchSizeOfQueue(t *testing.T) {
	t.Parallel()
	c := Config{BatchSize: 10, QueueBatchSizes: map[string]int{"report-generate": 1}}
	require.Equal(t, 1, c.batchSizeOf("report-generate"), "report-generate")
	require.Equal(t, 10, c.batchSizeOf("interview-completed"), "interview-completed")
	c.QueueBatchSizes["bad"] = 11
	require.ErrorContains(t, c.Validate(), "queue bad", "a batch size of 11 must be refused")
}

func TestStaleReceipt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, message string
		want          bool
	}{
		{"ReceiptHandleIsInvalid", "", true},
		{"AWS.SimpleQueueService.ReceiptHandleIsInvalid", "", true},
		// What SQS answers for a handle whose visibility timeout ran out.
		{"InvalidParameterValue", "Value abc for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.", true},
		{"InvalidParameterValue", "Value 0 for parameter VisibilityTimeout is invalid.", false},
		{"InternalError", "receipt handle", false},
		{"ServiceUnavailable", "", false},
	} {
		assert.Equal(t, tc.want, staleReceipt(tc.code, tc.message), "%s: %s", tc.code, tc.message)
	}
}
