package brokertest

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FetchErrors is what Read does with a fetch error.
type FetchErrors int

const (
	// LogFetchErrors logs them (the default): a broker answers errors
	// for a while when a partition's leadership moves, and the read
	// goes on.
	LogFetchErrors FetchErrors = iota
	// FailFetchErrors fails the test (t.Errorf) and reads on.
	FailFetchErrors
	// IgnoreFetchErrors reads on silently.
	IgnoreFetchErrors
)

// ReadOption changes how Read reads.
type ReadOption func(*readOptions)

type readOptions struct {
	client  []kgo.Opt
	errs    FetchErrors
	exactly bool
}

// ReadClient adds options to the reading client: TLS, SASL, an
// isolation level.
func ReadClient(opts ...kgo.Opt) ReadOption {
	return func(o *readOptions) { o.client = append(o.client, opts...) }
}

// OnFetchError says what to do with fetch errors.
func OnFetchError(e FetchErrors) ReadOption { return func(o *readOptions) { o.errs = e } }

// Exactly fails the test if the topic holds more than n records (Read
// polls half a second more after the n-th).
func Exactly() ReadOption { return func(o *readOptions) { o.exactly = true } }

// Read reads topic from the start through seeds until it has n records,
// and fails the test if ctx ends first.
func Read(t testing.TB, ctx context.Context, seeds []string, topic string, n int, opts ...ReadOption) []*kgo.Record {
	t.Helper()
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, o.client...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	poll := func(ctx context.Context) {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(tp string, p int32, err error) {
			if ctx.Err() != nil {
				return
			}
			switch o.errs {
			case LogFetchErrors:
				t.Logf("fetch %s/%d: %v", tp, p, err)
			case FailFetchErrors:
				t.Errorf("fetch %s/%d: %v", tp, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	for len(out) < n {
		if poll(ctx); ctx.Err() != nil && len(out) < n {
			t.Fatalf("read %d of %d records of %s: %v", len(out), n, topic, ctx.Err())
		}
	}
	if o.exactly {
		qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		poll(qctx)
		if len(out) != n {
			t.Fatalf("topic %s holds %d records, want %d", topic, len(out), n)
		}
	}
	return out
}

// Values are the records' values as strings.
func Values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}
