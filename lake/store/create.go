package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/simtel/simtel/internal/fsutil"
)

// ErrExists is wrapped by Create's error when an object already has the key.
var ErrExists = errors.New("object already exists")

// Creator is a Store that can create an object only when no object has its
// key, atomically: of several concurrent Creates of one key (from any
// number of processes or machines), exactly one succeeds and the others
// get ErrExists. The lake's catalog uses it to decide races (a
// measurement's field types); both stores of Open implement it.
type Creator interface {
	Store
	// Create stores a small object (it is read into memory) under key
	// unless one exists there. When it returns nil the object is durable;
	// when an object already has the key it returns an error wrapping
	// ErrExists and leaves that object alone.
	Create(ctx context.Context, key string, r io.Reader) error
}

// Create writes the object to a temporary file, syncs it, and links it to
// its key: link(2) fails with EEXIST when the name is taken, which makes
// the creation atomic among all processes sharing the directory (a rename
// would replace the existing object instead).
func (s *fileStore) Create(ctx context.Context, key string, r io.Reader) error {
	p, tmp, err := s.writeTemp(ctx, "create", key, r, -1)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // after the link the object lives on under key
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cannot create %s in %s: %w", key, s, ErrExists)
		}
		return fmt.Errorf("cannot link %s into place: %w", key, err)
	}
	if err := fsutil.SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("cannot sync directory of %s: %w", key, err)
	}
	return nil
}

// Create is a PutObject with If-None-Match: *, S3's conditional write
// (AWS since 2024, versitygw, MinIO): the service refuses it with 412
// Precondition Failed when the key exists, or 409 when a concurrent
// conditional write of the key is in progress. A service that ignores the
// header would make every Create succeed; one that rejects it answers 501.
func (s *s3Store) Create(ctx context.Context, key string, r io.Reader) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("cannot create %q in %s: %w", key, s, err)
	}
	data, err := io.ReadAll(ctxReader{ctx, r})
	if err != nil {
		return fmt.Errorf("cannot create %s in %s: reading: %w", key, s, err)
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        &s.bucket,
		Key:           aws.String(s.prefix + key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		IfNoneMatch:   aws.String("*"),
	})
	if err == nil {
		return nil
	}
	code, status := s3ErrorCode(err)
	switch {
	case status == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return fmt.Errorf("cannot create %s in %s: %w", key, s, ErrExists)
	case status == http.StatusConflict || code == "ConditionalRequestConflict":
		// Another conditional write of the key is under way; whether it
		// wins is not known yet, so this one has not (the caller reads the
		// key and retries if it is still absent).
		return fmt.Errorf("cannot create %s in %s: a concurrent write of the key is in progress: %w", key, s, err)
	case status == http.StatusNotImplemented || code == "NotImplemented":
		return fmt.Errorf("cannot create %s in %s: the S3 service does not support conditional writes (If-None-Match), which the lake's catalog needs to keep field types consistent: %w", key, s, err)
	}
	return s.classify("create", key, err)
}
