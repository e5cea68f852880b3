package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"
)

// uploadConcurrency is how many parts of one multipart upload are in flight.
const uploadConcurrency = 4

// s3Store keeps objects under a prefix of a bucket. Credentials come from
// the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY,
// AWS_PROFILE and the shared config files, then instance roles); requests
// are retried by the SDK's standard retryer.
type s3Store struct {
	client   *s3.Client
	bucket   string
	prefix   string // "" or ending in "/"
	endpoint string // for messages
	partSize int64
}

func openS3(ctx context.Context, bucket, prefix string, opts Options) (*s3Store, error) {
	var loadOpts []func(*config.LoadOptions) error
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("cannot load the AWS configuration (environment, ~/.aws/config): %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Credentials != nil {
		cfg.Credentials = credsProvider{cfg.Credentials}
	}
	endpoint := opts.S3Endpoint
	if endpoint != "" && !strings.Contains(endpoint, "://") {
		endpoint = "http://" + endpoint
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
	name := endpoint
	if name == "" {
		name = "AWS S3 (" + cfg.Region + ")"
	}
	return &s3Store{client: client, bucket: bucket, prefix: prefix, endpoint: name, partSize: opts.PartSize}, nil
}

func (s *s3Store) String() string {
	if s.prefix == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + strings.TrimSuffix(s.prefix, "/")
}

// credsProvider marks a failure to find credentials, which the SDK reports
// only as text, so classify can say what to set.
type credsProvider struct{ aws.CredentialsProvider }

type noCredsError struct{ err error }

func (e *noCredsError) Error() string { return e.err.Error() }
func (e *noCredsError) Unwrap() error { return e.err }

func (p credsProvider) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c, err := p.CredentialsProvider.Retrieve(ctx)
	if err != nil && ctx.Err() == nil {
		err = &noCredsError{err}
	}
	return c, err
}

// s3Error is a classified S3 failure: a sentence that says what to do,
// wrapping both the class (ErrAccessDenied, …) and the SDK's error.
type s3Error struct {
	msg   string
	class error
	err   error
}

func (e *s3Error) Error() string   { return e.msg + ": " + e.err.Error() }
func (e *s3Error) Unwrap() []error { return []error{e.class, e.err} }

// s3ErrorCode returns the S3 error code ("NoSuchKey") and the HTTP status
// of an SDK error, "" and 0 where err carries none.
func s3ErrorCode(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

// classify turns an SDK error into one that names the operation and, for
// the failures an operator can fix, says how.
func (s *s3Store) classify(op, key string, err error) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("%s %s in %s", op, key, s)
	code, status := s3ErrorCode(err)
	var noKey *types.NoSuchKey
	var notFound *types.NotFound
	var noBucket *types.NoSuchBucket
	var noCreds *noCredsError
	switch {
	case errors.As(err, &noCreds):
		return &s3Error{
			msg:   fmt.Sprintf("cannot %s: no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials", what),
			class: ErrNoCredentials, err: err,
		}
	case errors.As(err, &noBucket) || code == "NoSuchBucket":
		return &s3Error{
			msg:   fmt.Sprintf("cannot %s: bucket %s does not exist at %s: create it first (aws s3 mb s3://%s, or your storage's console)", what, s.bucket, s.endpoint, s.bucket),
			class: ErrNoBucket, err: err,
		}
	case errors.As(err, &noKey) || errors.As(err, &notFound) || code == "NoSuchKey" || code == "NotFound" || status == http.StatusNotFound:
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case status == http.StatusForbidden || code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch":
		return &s3Error{
			msg:   fmt.Sprintf("cannot %s: access denied by %s: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the profile in AWS_PROFILE) and the bucket policy", what, s.endpoint),
			class: ErrAccessDenied, err: err,
		}
	case isUnreachable(err):
		return &s3Error{
			msg:   fmt.Sprintf("cannot %s: cannot reach S3 endpoint %s: is the service running and --s3-endpoint right?", what, s.endpoint),
			class: ErrUnreachable, err: err,
		}
	}
	return fmt.Errorf("cannot %s: %w", what, err)
}

func isUnreachable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

func (s *s3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("cannot put %q in %s: %w", key, s, err)
	}
	if size < 0 {
		// Unknown length: spool to a temporary file so the upload can be
		// sized, split into parts and retried.
		f, n, err := spool(ctx, r)
		if err != nil {
			return fmt.Errorf("cannot put %s in %s: buffering: %w", key, s, err)
		}
		defer func() { f.Close(); os.Remove(f.Name()) }()
		r, size = f, n
	}
	if size <= s.partSize {
		return s.putSingle(ctx, key, r, size)
	}
	return s.putMultipart(ctx, key, r, size)
}

// spool copies r into an unlinked-on-close temporary file.
func spool(ctx context.Context, r io.Reader) (*os.File, int64, error) {
	f, err := os.CreateTemp("", "simtel-s3-put-*")
	if err != nil {
		return nil, 0, err
	}
	n, err := io.Copy(f, ctxReader{ctx, r})
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, 0, err
	}
	return f, n, nil
}

// source reads the body of a Put. When the reader can read at an offset
// (a file, a bytes.Reader) parts are sections of it, starting at its
// current position; otherwise each part is read into memory in turn. Either
// way a part body can seek, which the SDK needs to sign plain-HTTP requests
// and to retry.
type source struct {
	r    io.Reader
	ra   io.ReaderAt
	base int64
}

func newSource(r io.Reader) source {
	ra, ok := r.(io.ReaderAt)
	sk, ok2 := r.(io.Seeker)
	if ok && ok2 {
		if pos, err := sk.Seek(0, io.SeekCurrent); err == nil {
			return source{r: r, ra: ra, base: pos}
		}
	}
	return source{r: r}
}

func (src source) section(off, n int64) (io.ReadSeeker, error) {
	if src.ra != nil {
		return io.NewSectionReader(src.ra, src.base+off, n), nil
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(src.r, buf); err != nil {
		return nil, fmt.Errorf("reading bytes %d-%d: %w", off, off+n, err)
	}
	return bytes.NewReader(buf), nil
}

// checkEnd makes sure the reader holds exactly size bytes, so a wrong size
// does not store a truncated object.
func (src source) checkEnd(size int64) error {
	if src.ra != nil {
		var one [1]byte
		if size > 0 {
			if n, _ := src.ra.ReadAt(one[:], src.base+size-1); n != 1 {
				return fmt.Errorf("reader holds fewer than the %d bytes announced", size)
			}
		}
		if n, _ := src.ra.ReadAt(one[:], src.base+size); n != 0 {
			return fmt.Errorf("reader holds more than the %d bytes announced", size)
		}
		return nil
	}
	var one [1]byte
	if n, _ := io.ReadFull(src.r, one[:]); n != 0 {
		return fmt.Errorf("reader holds more than the %d bytes announced", size)
	}
	return nil
}

func (s *s3Store) putSingle(ctx context.Context, key string, r io.Reader, size int64) error {
	src := newSource(r)
	body, err := src.section(0, size)
	if err != nil {
		return fmt.Errorf("cannot put %s in %s: %w", key, s, err)
	}
	if err := src.checkEnd(size); err != nil {
		return fmt.Errorf("cannot put %s in %s: %w", key, s, err)
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.prefix + key),
		Body:          body,
		ContentLength: aws.Int64(size),
	})
	return s.classify("put", key, err)
}

// putMultipart uploads size bytes of r in parts, several at a time. On any
// failure the upload is aborted, so nothing appears under key and the
// service frees the parts.
func (s *s3Store) putMultipart(ctx context.Context, key string, r io.Reader, size int64) (err error) {
	full := s.prefix + key
	// Every part carries a CRC32 the service checks, and the upload is
	// declared with that algorithm so Complete may (and must) list them.
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: &s.bucket, Key: &full, ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
	})
	if err != nil {
		return s.classify("start multipart upload of", key, err)
	}
	uploadID := created.UploadId
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.bucket, Key: &full, UploadId: uploadID}); aerr != nil {
			err = fmt.Errorf("%w (and aborting the upload failed: %v; the bucket's lifecycle rule for incomplete uploads must clean it)", err, aerr)
		}
	}()

	src := newSource(r)
	nparts := int((size + s.partSize - 1) / s.partSize)
	parts := make([]types.CompletedPart, nparts)
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(uploadConcurrency)
	for i := 0; i < nparts; i++ {
		off := int64(i) * s.partSize
		n := min(s.partSize, size-off)
		body, serr := src.section(off, n)
		if serr != nil {
			_ = eg.Wait()
			return fmt.Errorf("cannot put %s in %s: %w", key, s, serr)
		}
		num := int32(i + 1)
		eg.Go(func() error {
			out, err := s.client.UploadPart(ectx, &s3.UploadPartInput{
				Bucket: &s.bucket, Key: &full, UploadId: uploadID,
				PartNumber: aws.Int32(num), Body: body, ContentLength: aws.Int64(n),
				ChecksumAlgorithm: types.ChecksumAlgorithmCrc32,
			})
			if err != nil {
				return s.classify(fmt.Sprintf("upload part %d of", num), key, err)
			}
			parts[num-1] = types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32}
			return nil
		})
		if ectx.Err() != nil {
			break
		}
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	if err := src.checkEnd(size); err != nil {
		return fmt.Errorf("cannot put %s in %s: %w", key, s, err)
	}
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &s.bucket, Key: &full, UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	return s.classify("complete multipart upload of", key, err)
}

func (s *s3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("cannot get %q from %s: %w", key, s, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return nil, s.classify("get", key, err)
	}
	return out.Body, nil
}

func (s *s3Store) Stat(ctx context.Context, key string) (Object, error) {
	if err := checkKey(key); err != nil {
		return Object{}, fmt.Errorf("cannot stat %q in %s: %w", key, s, err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err != nil {
		return Object{}, s.classify("stat", key, err)
	}
	return Object{Key: key, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, fmt.Errorf("cannot list %s: %w", s, err)
	}
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)})
	var out []Object
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.classify("list", prefix+"*", err)
		}
		for _, o := range page.Contents {
			k := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if strings.HasSuffix(k, "/") { // a "directory" marker made by some tools
				continue
			}
			out = append(out, Object{Key: k, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("cannot delete %q from %s: %w", key, s, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: aws.String(s.prefix + key)})
	if err = s.classify("delete", key, err); errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
