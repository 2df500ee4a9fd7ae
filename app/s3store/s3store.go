// Package s3store is the disputes spec's object store on AWS:
// disputes.Objects over Amazon S3 GetObject, from which the ingest-worker
// reads the documents that ingest-queue's ObjectCreated notifications name.
// The composition root hands it to the spec (disputes.Adapters) when
// disputes.s3_bucket is set; handlers never import an AWS service client.
//
// # Errors
//
// Every error names the object. What no retry can fix is permanent
// (failure.Permanent): the object or the bucket does not exist (deleted
// since the notification, or a wrong bucket), access is denied (the role
// lacks s3:GetObject on the bucket's prefix), the object is archived, or it
// is larger than MaxBytes. The ingest-worker lets those fail until
// ingest-queue's maxReceiveCount, then ingest-dlq, where a fixed permission
// can be redriven. Everything else — throttling (SlowDown, 503), server
// errors (5xx), network errors, the Timeout — is transient, retried by the
// SDK's retryer first and then by the queue.
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/eventpipe/eventpipe/app/failure"
	"github.com/eventpipe/eventpipe/handlers/disputes"
)

// Defaults of Objects.
const (
	// DefaultMaxBytes bounds a document: 10 MiB, far above a policy or FAQ
	// page, far below what would strain a worker's memory.
	DefaultMaxBytes = 10 << 20
	// DefaultTimeout bounds one GetObject, body included: half the
	// ingest-worker's 60 s handler timeout, leaving the rest for the
	// database write.
	DefaultTimeout = 30 * time.Second
)

// ErrTooLarge is wrapped by the permanent error of an object larger than
// Objects.MaxBytes. It has a TooLarge method, so a consumer that declares
// its own store interface recognises it without importing this package.
var ErrTooLarge error = tooLargeError{}

type tooLargeError struct{}

func (tooLargeError) Error() string { return "object larger than the limit" }

// TooLarge reports true: the object exceeds the limit.
func (tooLargeError) TooLarge() bool { return true }

// GetObjectAPI is the part of the S3 client the adapter uses: exactly the
// action the service's IAM policy grants (s3:GetObject).
type GetObjectAPI interface {
	GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

var _ GetObjectAPI = (*s3.Client)(nil)

// Objects is disputes.Objects on Amazon S3 (or an S3-compatible store).
type Objects struct {
	Client GetObjectAPI
	// MaxBytes is the largest object Get reads; a larger one is a permanent
	// ErrTooLarge, found from its Content-Length before the body is read
	// (and by counting when the length is not sent). DefaultMaxBytes when 0.
	MaxBytes int64
	// Timeout bounds one Get, body included (the SDK's own retries count
	// against it); DefaultTimeout when 0.
	Timeout time.Duration
}

var _ disputes.Objects = (*Objects)(nil)

// Get implements disputes.Objects: the object's bytes, at most MaxBytes of
// them, within Timeout. Errors are classed as the package says.
func (o *Objects) Get(ctx context.Context, bucket, key string) ([]byte, error) {
	limit, timeout := o.MaxBytes, o.Timeout
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := o.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, classify(fmt.Errorf("S3 GetObject s3://%s/%s: %w", bucket, key, err))
	}
	defer func() { _ = out.Body.Close() }()
	if n := aws.ToInt64(out.ContentLength); n > limit {
		return nil, failure.Permanentf("S3 GetObject s3://%s/%s: %d bytes: %w (%d bytes)", bucket, key, n, ErrTooLarge, limit)
	}
	body, err := io.ReadAll(io.LimitReader(out.Body, limit+1))
	if err != nil {
		return nil, failure.AsTransient(fmt.Errorf("S3 GetObject s3://%s/%s: read body: %w", bucket, key, err), 0)
	}
	if int64(len(body)) > limit {
		return nil, failure.Permanentf("S3 GetObject s3://%s/%s: %w (%d bytes)", bucket, key, ErrTooLarge, limit)
	}
	return body, nil
}

// permanentCodes are the S3 error codes no retry can fix.
var permanentCodes = map[string]bool{
	"NoSuchKey":          true,
	"NoSuchBucket":       true,
	"NoSuchVersion":      true,
	"AccessDenied":       true,
	"AllAccessDisabled":  true,
	"InvalidBucketName":  true,
	"InvalidObjectState": true, // archived (Glacier): needs a restore first
}

// classify marks err permanent for the codes in permanentCodes (and a 404
// without a code), transient otherwise: throttling, 5xx, network errors and
// the deadline are worth another try.
func classify(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && permanentCodes[api.ErrorCode()] {
		return failure.AsPermanent(err)
	}
	var resp *awshttp.ResponseError
	if errors.As(err, &resp) && resp.HTTPStatusCode() == http.StatusNotFound {
		return failure.AsPermanent(err)
	}
	return failure.AsTransient(err, 0)
}

// New returns the adapter for c, with an S3 client from the AWS SDK's
// default chain (credentials, AWS_REGION, AWS_ENDPOINT_URL_S3), c.Region,
// c.Endpoint and c.PathStyle overriding it when set (an emulator). It calls
// no AWS API: a missing permission shows on the first document, as a
// permanent AccessDenied.
func New(ctx context.Context, c disputes.S3Config) (*Objects, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("S3: AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
	})
	return &Objects{Client: client, MaxBytes: c.MaxObjectBytes, Timeout: c.Timeout}, nil
}
