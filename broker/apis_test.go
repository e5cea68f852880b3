package broker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

// A handler added to the table is advertised by ApiVersions and answered:
// what a broker advertises comes from its handlers, not from a list kept
// beside them.
func TestRegisteredHandlerIsAdvertised(t *testing.T) {
	b, err := New(Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	const key = 48 // DescribeClientQuotas: not served by the broker itself
	if _, ok := b.apis.Get(key); ok {
		t.Fatalf("key %d is already served; pick another for the test", key)
	}
	b.apis.Add(kapi.API{Key: key, Min: 0, Max: 0, Handle: func(r *kapi.Request) kmsg.Response {
		resp := r.Msg.(*kmsg.DescribeClientQuotasRequest).ResponseKind().(*kmsg.DescribeClientQuotasResponse)
		msg := "fake handler"
		resp.ErrorMessage = &msg
		return resp
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("broker stopped with error: %v", err)
		}
	}()

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr().String()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	vresp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(rctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	advertised := map[int16]bool{}
	for _, k := range vresp.ApiKeys {
		advertised[k.ApiKey] = true
		if a, ok := b.apis.Get(k.ApiKey); !ok || a.Min != k.MinVersion || a.Max != k.MaxVersion {
			t.Errorf("%s advertised v%d-v%d without a matching handler", kmsg.NameForKey(k.ApiKey), k.MinVersion, k.MaxVersion)
		}
	}
	if !advertised[key] {
		t.Fatalf("the added handler's key %d is not advertised", key)
	}
	for _, k := range b.apis.Keys() {
		if a, _ := b.apis.Get(k); !a.ClusterOnly && !advertised[k] {
			t.Errorf("%s has a handler but is not advertised", a.Name())
		}
	}
	resp, err := kmsg.NewPtrDescribeClientQuotasRequest().RequestWith(rctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorMessage == nil || *resp.ErrorMessage != "fake handler" {
		t.Fatalf("the request did not reach the added handler: %+v", resp)
	}
}
