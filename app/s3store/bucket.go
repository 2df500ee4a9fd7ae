package s3store

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/eventpipe/eventpipe/app/failure"
)

// ObjectAPI is the part of the S3 client a Bucket uses: s3:GetObject and
// s3:PutObject.
type ObjectAPI interface {
	GetObjectAPI
	PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

var _ ObjectAPI = (*s3.Client)(nil)

// Bucket reads and writes the objects of one bucket by key: the StackUp AI
// worker's store (resume PDFs and answer audio in; analysis documents,
// feedback reports and TTS audio out). Errors are classed as the package
// doc says: a missing object, a missing bucket or a denied access is
// permanent, an outage transient.
type Bucket struct {
	Client ObjectAPI
	Name   string
	// MaxBytes bounds what Get reads (DefaultMaxBytes when 0); a larger
	// object wraps ErrTooLarge, permanent.
	MaxBytes int64
	// Timeout bounds one call, body included; DefaultTimeout when 0.
	Timeout time.Duration
}

// Get returns the object's bytes.
func (b *Bucket) Get(ctx context.Context, key string) ([]byte, error) {
	return (&Objects{Client: b.Client, MaxBytes: b.MaxBytes, Timeout: b.Timeout}).Get(ctx, b.Name, key)
}

// Put stores data at key with its content type, replacing any object there.
func (b *Bucket) Put(ctx context.Context, key string, data []byte, contentType string) error {
	timeout := b.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in := &s3.PutObjectInput{Bucket: aws.String(b.Name), Key: aws.String(key), Body: bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data)))}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	if _, err := b.Client.PutObject(ctx, in); err != nil {
		return classify(fmt.Errorf("S3 PutObject s3://%s/%s: %w", b.Name, key, err))
	}
	return nil
}

// BucketConfig configures NewBucket.
type BucketConfig struct {
	Bucket string
	// Region, Endpoint and PathStyle override the SDK's default chain when
	// set (an emulator: its endpoint, path style, us-east-1).
	Region    string
	Endpoint  string
	PathStyle bool
	MaxBytes  int64
	Timeout   time.Duration
}

// NewBucket returns a Bucket on an S3 client from the AWS SDK's default
// chain (credentials, AWS_REGION, AWS_ENDPOINT_URL_S3), c overriding it. It
// calls no AWS API: a missing permission shows on the first object.
func NewBucket(ctx context.Context, c BucketConfig) (*Bucket, error) {
	if c.Bucket == "" {
		return nil, failure.Permanentf("S3: no bucket named")
	}
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
			// S3-compatible stores and emulators do not all take the
			// SDK's default trailing (aws-chunked) checksums.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		}
		o.UsePathStyle = c.PathStyle
	})
	return &Bucket{Client: client, Name: c.Bucket, MaxBytes: c.MaxBytes, Timeout: c.Timeout}, nil
}
