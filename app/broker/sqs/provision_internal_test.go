package sqs

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/topology"
)

func TestS3StatementMergesIntoAccessPolicy(t *testing.T) {
	t.Parallel()
	const queue = "arn:aws-cn:sqs:cn-north-1:123456789012:ingest-queue"
	stmt := s3Statement(queue, topology.S3Notifications{Bucket: "kb-docs"})
	assert.Equal(t, map[string]any{"ArnLike": map[string]any{"aws:SourceArn": "arn:aws-cn:s3:::kb-docs"}}, stmt["Condition"],
		"the bucket's ARN is in the queue's partition; no account condition unless configured")

	policy, had, changed, err := withStatement("", stmt)
	require.NoError(t, err)
	assert.True(t, changed)
	assert.Empty(t, had)
	again, _, changed, err := withStatement(policy, stmt)
	require.NoError(t, err)
	assert.False(t, changed, "in place already")
	assert.Equal(t, policy, again)

	// IAM allows a lone statement object; it is kept, ours added.
	single := `{"Version":"2012-10-17","Statement":{"Sid":"ops","Effect":"Allow","Principal":"*","Action":"sqs:GetQueueUrl","Resource":"` + queue + `"}}`
	policy, _, changed, err = withStatement(single, stmt)
	require.NoError(t, err)
	assert.True(t, changed)
	var doc struct{ Statement []map[string]any }
	require.NoError(t, json.Unmarshal([]byte(policy), &doc))
	require.Len(t, doc.Statement, 2)
	assert.Equal(t, "ops", doc.Statement[0]["Sid"])
	assert.Equal(t, s3StatementSid, doc.Statement[1]["Sid"])

	// A reformatted copy of the same statement is no change.
	b, err := json.MarshalIndent(map[string]any{"Version": "2012-10-17", "Statement": []any{stmt}}, "", "  ")
	require.NoError(t, err)
	_, _, changed, err = withStatement(string(b), stmt)
	require.NoError(t, err)
	assert.False(t, changed)

	_, _, _, err = withStatement("{not json", stmt)
	assert.ErrorContains(t, err, "access policy is not JSON")
	c, _ := desired{name: "q", s3: &topology.S3Notifications{Bucket: "kb-docs"}}.policyChange(map[string]string{attrArn: queue, attrPolicy: `{"Statement":"x"}`})
	require.NotNil(t, c)
	assert.NotEmpty(t, c.Fix, "an unreadable policy is reported, never overwritten")
}
