package store

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Errors an S3 store wraps (together with the SDK's own error) so callers
// can tell a configuration problem from a passing one with errors.Is.
var (
	// ErrAccessDenied: the service refused the credentials (HTTP 403,
	// InvalidAccessKeyId, SignatureDoesNotMatch). Retrying does not help.
	ErrAccessDenied = errors.New("access denied")
	// ErrNoBucket: the bucket of the lake URL does not exist.
	ErrNoBucket = errors.New("bucket does not exist")
	// ErrNoCredentials: no credentials were found in the environment, the
	// shared files or an instance role.
	ErrNoCredentials = errors.New("no credentials")
	// ErrUnreachable: the endpoint could not be connected to. A later
	// attempt may succeed once the service is back.
	ErrUnreachable = errors.New("object store unreachable")
)

// DefaultPartSize is the multipart part size used when Options.PartSize is 0.
const DefaultPartSize = 16 << 20

// minPartSize is S3's smallest allowed part (except the last).
const minPartSize = 5 << 20

// Open opens the lake at rawURL: file:///abs/dir (or a plain path, or
// file://./rel) for a local directory, s3://bucket/prefix for an
// S3-compatible service. Opening does not contact the service; the first
// operation reports a bad endpoint or credentials.
func Open(ctx context.Context, rawURL string, opts Options) (Store, error) {
	if opts.PartSize == 0 {
		opts.PartSize = DefaultPartSize
	}
	if opts.PartSize < minPartSize {
		return nil, fmt.Errorf("part size %d is below S3's minimum of 5 MiB", opts.PartSize)
	}
	switch {
	case rawURL == "":
		return nil, errors.New("no lake URL given: use file:///dir or s3://bucket/prefix")
	case strings.HasPrefix(rawURL, "s3://"):
		bucket, prefix, _ := strings.Cut(strings.TrimPrefix(rawURL, "s3://"), "/")
		if bucket == "" {
			return nil, fmt.Errorf("lake URL %q names no bucket: use s3://bucket/prefix", rawURL)
		}
		prefix = strings.Trim(prefix, "/")
		if prefix != "" {
			if err := checkKey(prefix); err != nil {
				return nil, fmt.Errorf("lake URL %q: bad prefix: %w", rawURL, err)
			}
			prefix += "/"
		}
		return openS3(ctx, bucket, prefix, opts)
	case strings.HasPrefix(rawURL, "file://"):
		return openFile(strings.TrimPrefix(rawURL, "file://"))
	case strings.Contains(rawURL, "://"):
		scheme, _, _ := strings.Cut(rawURL, "://")
		return nil, fmt.Errorf("lake URL %q: scheme %q is not supported: use file:///dir or s3://bucket/prefix", rawURL, scheme)
	default:
		return openFile(rawURL)
	}
}

// checkKey refuses keys that could escape the root or that are not in the
// canonical "/"-separated form.
func checkKey(key string) error {
	switch {
	case key == "" || key == ".":
		return fmt.Errorf("key %q names no object", key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("key %q is absolute; keys are relative to the lake root", key)
	case strings.ContainsRune(key, '\\') || strings.ContainsRune(key, 0):
		return fmt.Errorf("key %q contains a backslash or NUL", key)
	case path.Clean(key) != key:
		return fmt.Errorf("key %q is not clean (\"..\", \".\", \"//\" or a trailing slash)", key)
	case key == ".." || strings.HasPrefix(key, "../"):
		return fmt.Errorf("key %q leaves the lake root", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, tmpPrefix) {
			return fmt.Errorf("key %q uses the reserved prefix %q", key, tmpPrefix)
		}
	}
	return nil
}

// checkPrefix accepts "" and any prefix of a valid key.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if strings.HasPrefix(prefix, "/") {
		return fmt.Errorf("prefix %q is absolute", prefix)
	}
	for _, seg := range strings.Split(prefix, "/") {
		if seg == ".." || seg == "." {
			return fmt.Errorf("prefix %q contains %q", prefix, seg)
		}
	}
	return nil
}
