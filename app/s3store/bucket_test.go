package s3store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/s3store"
	"github.com/eventpipe/eventpipe/app/testenv"
)

// A Bucket on the emulator: Put then Get round-trips bytes and content
// type; a missing key is permanent, a too-large object permanent.
func TestBucketPutGetOnTheEmulator(t *testing.T) {
	t.Parallel()
	c := emulator(t)
	name := newBucket(t, c, nil)
	b := &s3store.Bucket{Client: c, Name: name, MaxBytes: 1024, Timeout: 10 * time.Second}
	ctx := context.Background()
	key := "feedback/99/report.md"
	t.Cleanup(func() {
		_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String(key)})
	})

	require.NoError(t, b.Put(ctx, key, []byte("# Report\n"), "text/markdown; charset=utf-8"))
	got, err := b.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "# Report\n", string(got))
	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(name), Key: aws.String(key)})
	require.NoError(t, err)
	assert.Equal(t, "text/markdown; charset=utf-8", aws.ToString(head.ContentType))

	_, err = b.Get(ctx, "resumes/raw/1/missing.pdf")
	assert.Equal(t, failure.Permanent, failure.Of(err), "%v", err)

	big := "resumes/raw/1/big.pdf"
	t.Cleanup(func() {
		_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String(big)})
	})
	require.NoError(t, b.Put(ctx, big, []byte(strings.Repeat("x", 2048)), "application/pdf"))
	_, err = b.Get(ctx, big)
	assert.ErrorIs(t, err, s3store.ErrTooLarge)
	assert.Equal(t, failure.Permanent, failure.Of(err))
}

// NewBucket's client against the emulator (what serve builds), and an
// unreachable endpoint: transient.
func TestNewBucket(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	c := emulator(t)
	name := newBucket(t, c, nil)
	ctx := context.Background()
	b, err := s3store.NewBucket(ctx, s3store.BucketConfig{Bucket: name, Region: testenv.SQSRegion, Endpoint: testenv.SQSEndpoint(t), PathStyle: true})
	require.NoError(t, err)
	key := "interview/tts/1/2/seg-0.mp3"
	t.Cleanup(func() {
		_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(name), Key: aws.String(key)})
	})
	require.NoError(t, b.Put(ctx, key, []byte("ID3"), "audio/mpeg"))
	got, err := b.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, "ID3", string(got))

	down := &s3store.Bucket{Name: name, Timeout: 3 * time.Second, Client: s3.New(s3.Options{Region: testenv.SQSRegion,
		BaseEndpoint: aws.String("http://127.0.0.1:1"), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})}
	err = down.Put(ctx, key, []byte("x"), "")
	assert.Equal(t, failure.Transient, failure.Of(err), "%v", err)
	_, err = s3store.NewBucket(ctx, s3store.BucketConfig{})
	assert.Error(t, err)
}
