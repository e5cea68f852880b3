// Package storetest opens lake stores for tests.
package storetest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/lake/store"
)

// S3 starts an S3 server for the test (testutil.StartS3: skipped without
// versitygw), points this process's AWS environment at it and opens the
// lake store at its URL. The server is returned for what a test also
// needs of it: its URL and endpoint for a child process, restarts.
func S3(t testing.TB) (store.Store, *testutil.S3Server) {
	t.Helper()
	srv := testutil.StartS3(t)
	srv.SetEnv(t)
	st, err := store.Open(context.Background(), srv.URL, store.Options{S3Endpoint: srv.Endpoint, Region: srv.Region})
	if err != nil {
		t.Fatal(err)
	}
	return st, srv
}

// Dir opens a lake store in a directory of the test's.
func Dir(t testing.TB) store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Open opens the lake store of a test that runs against both back ends: a
// directory of the test's when s3 is false, else an S3 server as S3 starts
// it. Beside the store it returns the lake's URL and the S3 endpoint ("" for
// a directory), which Iceberg options and child processes' flags name.
func Open(t testing.TB, s3 bool) (st store.Store, url, endpoint string) {
	t.Helper()
	if s3 {
		st, srv := S3(t)
		return st, srv.URL, srv.Endpoint
	}
	url = "file://" + filepath.Join(t.TempDir(), "lake")
	st, err := store.Open(context.Background(), url, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st, url, ""
}
