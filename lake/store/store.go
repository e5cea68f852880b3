// Package store is the lake's object store: a local directory (file:///dir)
// or any S3-compatible service (s3://bucket/prefix) through aws-sdk-go-v2.
package store

import (
	"context"
	"errors"
	"io"
	"time"
)

// ErrNotFound is wrapped by errors for a key that does not exist.
var ErrNotFound = errors.New("object not found")

// Object describes one stored object.
type Object struct {
	Key     string // relative to the store's root, "/"-separated
	Size    int64
	ModTime time.Time
}

// Store is an object store rooted at a lake URL. Keys are relative to the
// root. Implementations are safe for concurrent use.
type Store interface {
	// Put stores the object, replacing any object with the same key. When it
	// returns nil the whole object is durable and visible to Get and List;
	// on error no partial object is visible under key. size is the exact
	// length of r, or -1 if unknown.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens an object. A missing key gives an error wrapping ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// Stat describes an object; a missing key gives ErrNotFound.
	Stat(ctx context.Context, key string) (Object, error)
	// List returns every object whose key starts with prefix, sorted by key.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes an object; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// String is the root URL, for messages.
	String() string
}

// Options configure Open.
type Options struct {
	// S3Endpoint is the base URL of an S3-compatible service
	// (http://127.0.0.1:7070); empty means AWS itself. Path-style
	// addressing is used whenever an endpoint is given.
	S3Endpoint string
	// Region defaults to AWS_REGION / the shared config, else "us-east-1".
	Region string
	// PartSize is the multipart upload part size (default 16 MiB); objects
	// larger than one part are uploaded in parts.
	PartSize int64
}
