package disputes_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// An S3 ObjectCreated notification as S3 sends it (AWS docs' example shape).
const s3Example = `{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3","awsRegion":"ap-south-1",
"eventTime":"2026-11-12T09:14:03.512Z","eventName":"ObjectCreated:Put","userIdentity":{"principalId":"AWS:X"},
"requestParameters":{"sourceIPAddress":"10.0.0.1"},"responseElements":{"x-amz-request-id":"R"},
"s3":{"s3SchemaVersion":"1.0","configurationId":"ingest","bucket":{"name":"kb-docs","ownerIdentity":{"principalId":"X"},"arn":"arn:aws:s3:::kb-docs"},
"object":{"key":"policies/charge+backs%282026%29.md","size":1024,"eTag":"d41d8cd98f00b204e9800998ecf8427e","sequencer":"0055AED6DCD90281E5"}}},
{"eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"kb-docs"},"object":{"key":"old.md"}}}]}`

func TestDecodeS3Notification(t *testing.T) {
	t.Parallel()
	refs, err := disputes.DecodeS3Notification([]byte(s3Example))
	require.NoError(t, err)
	assert.Equal(t, []disputes.ObjectRef{{Bucket: "kb-docs", Key: "policies/charge backs(2026).md", Sequencer: "0055AED6DCD90281E5", EventName: "ObjectCreated:Put"}}, refs,
		"URL-decoded key; removals ignored")

	refs, err = disputes.DecodeS3Notification([]byte(`{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-11-12T09:14:03.512Z","Bucket":"kb-docs"}`))
	require.NoError(t, err)
	assert.Empty(t, refs, "S3's test event is not a document")

	for name, body := range map[string]string{
		"null": `null`, "no records": `{"Records":[]}`, "not json": `{"Records":`,
		"no bucket": `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"object":{"key":"k"}}}]}`,
		"bad key":   `{"Records":[{"eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"%zz"}}}]}`,
	} {
		_, err := disputes.DecodeS3Notification([]byte(body))
		require.ErrorIs(t, err, disputes.ErrInvalidEnvelope, name)
	}

	refs, err = disputes.DecodeS3Notification(disputes.S3Notification("b", "a b+c.md", time.Now()))
	require.NoError(t, err)
	require.Len(t, refs, 1)
	assert.Equal(t, "a b+c.md", refs[0].Key, "S3Notification round-trips")
}

func TestHasHeaderBlock(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		"---\ntitle: x\n---\nbody":    true,
		"---\r\ntitle: x\r\n---\r\n":  true,
		"---\n---\nbody":              false, // empty header
		"title: x\n---\n":             false,
		"---\ntitle: x\nno end":       false,
		"":                            false,
		"# Just markdown\n":           false,
		"---\n: no name\n---\n":       false,
		"---\nfoo\nbar: baz\n---\nok": true,
	} {
		assert.Equal(t, want, disputes.HasHeaderBlock([]byte(doc)), "%q", doc)
	}
}
