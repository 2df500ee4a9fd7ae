package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/app/s3store"
	"github.com/eventpipe/eventpipe/app/testenv"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// emulator is an S3 client on the emulator (fauxqs serves S3 on the SQS
// endpoint, path-style), for setting up buckets and objects.
func emulator(t *testing.T) *s3.Client {
	t.Helper()
	return s3.New(s3.Options{
		Region:       testenv.SQSRegion,
		BaseEndpoint: aws.String(testenv.SQSEndpoint(t)),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		// PutObject's default trailing checksum (aws-chunked) is not the
		// point here; plain bodies work on every S3 emulator.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
	})
}

// newBucket creates a bucket of the test's own and puts objects in it; both
// are deleted when the test ends.
func newBucket(t *testing.T, c *s3.Client, objects map[string]string) string {
	t.Helper()
	ctx := context.Background()
	bucket := "ept-" + strings.ToLower(watermill.NewShortUUID())
	_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	require.NoError(t, err)
	for key, body := range objects {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)})
		require.NoError(t, err, key)
	}
	t.Cleanup(func() {
		for key := range objects {
			_, _ = c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		}
		_, _ = c.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
	})
	return bucket
}

// Against the emulator's S3: an object's bytes (a key with a space, a plus
// and non-ASCII), and each class of failure S3 answers with.
func TestGetOnTheEmulator(t *testing.T) {
	t.Parallel()
	c := emulator(t)
	const doc = "---\ntitle: Chargebacks\n---\nbody\n"
	bucket := newBucket(t, c, map[string]string{"policies/charge backs+été.md": doc, "big.bin": strings.Repeat("x", 2048)})
	objects := &s3store.Objects{Client: c, MaxBytes: 1024, Timeout: 10 * time.Second}
	ctx := context.Background()

	got, err := objects.Get(ctx, bucket, "policies/charge backs+été.md")
	require.NoError(t, err)
	assert.Equal(t, doc, string(got))

	_, err = objects.Get(ctx, bucket, "missing.md")
	require.Error(t, err)
	assert.Equal(t, failure.Permanent, failure.Of(err), "%v", err)
	var noKey *types.NoSuchKey
	require.ErrorAs(t, err, &noKey)
	assert.Contains(t, err.Error(), "s3://"+bucket+"/missing.md")

	_, err = objects.Get(ctx, bucket+"-gone", "a.md")
	require.Error(t, err)
	assert.Equal(t, failure.Permanent, failure.Of(err), "%v", err)
	assert.Contains(t, err.Error(), "NoSuchBucket")

	_, err = objects.Get(ctx, bucket, "big.bin")
	require.ErrorIs(t, err, s3store.ErrTooLarge)
	assert.Equal(t, failure.Permanent, failure.Of(err))
}

// New builds the client from the SDK's chain with the configured endpoint,
// region and path style: its requests reach the emulator's bucket.
func TestNewReadsFromTheConfiguredEndpoint(t *testing.T) {
	// t.Setenv: the SDK's credential chain reads the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	bucket := newBucket(t, emulator(t), map[string]string{"a b.md": "---\nk: v\n---\n"})
	objects, err := s3store.New(context.Background(), disputes.S3Config{
		Region: testenv.SQSRegion, Endpoint: testenv.SQSEndpoint(t), PathStyle: true, MaxObjectBytes: 100, Timeout: 5 * time.Second,
	})
	require.NoError(t, err)
	assert.Equal(t, int64(100), objects.MaxBytes)
	assert.Equal(t, 5*time.Second, objects.Timeout)
	got, err := objects.Get(context.Background(), bucket, "a b.md")
	require.NoError(t, err)
	assert.Equal(t, "---\nk: v\n---\n", string(got))
}

// s3Error is an S3 REST error response.
func s3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>m</Message><RequestId>R</RequestId><HostId>H</HostId></Error>`))
}

// contract is an S3 client on an httptest server: one attempt per call (the
// SDK's retries are the SDK's, not under test), path-style.
func contract(t *testing.T, h http.HandlerFunc) *s3.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// The request the SDK sends (GET /bucket/key, the key escaped once), and
// how each S3 answer is classed: the codes no retry fixes are permanent;
// throttling, server errors, the network and the deadline are transient.
func TestGetClassifiesWhatS3Answers(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []string
	)
	c := contract(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.EscapedPath())
		mu.Unlock()
		switch key := strings.TrimPrefix(r.URL.Path, "/kb-docs/"); key {
		case "ok.md":
			_, _ = w.Write([]byte("---\nk: v\n---\n"))
		case "unsized.bin": // chunked: no Content-Length to refuse it by
			w.(http.Flusher).Flush()
			_, _ = w.Write(bytes.Repeat([]byte("x"), 200))
		case "policies/a b+c.md":
			s3Error(w, http.StatusNotFound, "NoSuchKey")
		case "slow.md":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			status := map[string]int{"SlowDown": 503, "InternalError": 500, "ServiceUnavailable": 503, "AccessDenied": 403,
				"NoSuchKey": 404, "NoSuchBucket": 404, "InvalidObjectState": 403, "RequestTimeout": 400}[key]
			s3Error(w, status, key)
		}
	})
	objects := &s3store.Objects{Client: c, MaxBytes: 100, Timeout: 300 * time.Millisecond}
	ctx := context.Background()

	got, err := objects.Get(ctx, "kb-docs", "ok.md")
	require.NoError(t, err)
	assert.Equal(t, "---\nk: v\n---\n", string(got))
	_, _ = objects.Get(ctx, "kb-docs", "policies/a b+c.md")
	mu.Lock()
	assert.Equal(t, []string{"GET /kb-docs/ok.md", "GET /kb-docs/policies/a%20b%2Bc.md"}, seen, "path-style, the key escaped once")
	mu.Unlock()

	for code, want := range map[string]failure.Class{
		"NoSuchKey": failure.Permanent, "NoSuchBucket": failure.Permanent, "AccessDenied": failure.Permanent,
		"InvalidObjectState": failure.Permanent,
		"SlowDown":           failure.Transient, "InternalError": failure.Transient, "ServiceUnavailable": failure.Transient,
		"RequestTimeout": failure.Transient,
	} {
		_, err := objects.Get(ctx, "kb-docs", code)
		require.Error(t, err, code)
		assert.Equal(t, want, failure.Of(err), "%s: %v", code, err)
		assert.Contains(t, err.Error(), code)
	}

	_, err = objects.Get(ctx, "kb-docs", "unsized.bin")
	require.ErrorIs(t, err, s3store.ErrTooLarge, "counted when no length is sent")
	assert.Equal(t, failure.Permanent, failure.Of(err))

	start := time.Now()
	_, err = objects.Get(ctx, "kb-docs", "slow.md")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 3*time.Second, "the deadline ends the call")
	assert.Equal(t, failure.Transient, failure.Of(err), "%v", err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	offline := &s3store.Objects{Client: s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(closed.URL), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	})}
	_, err = offline.Get(ctx, "kb-docs", "ok.md")
	require.Error(t, err)
	assert.Equal(t, failure.Transient, failure.Of(err), "network: %v", err)
}
