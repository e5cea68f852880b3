// Package storetest opens lake stores for tests.
package storetest

import (
	"context"
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
