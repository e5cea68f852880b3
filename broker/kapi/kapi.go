// Package kapi is the broker's table of Kafka APIs. Each API is declared
// once, in the file that handles it, with its key, the versions it speaks
// and its handler; the broker's server dispatches from the table and builds
// its ApiVersions answer from it, so what is advertised is exactly what is
// handled.
//
// A package that serves APIs keeps a Table of its handlers, each file adding
// one in a package-level declaration:
//
//	var _ = apis.Add(kapi.API{Key: 26, Min: 0, Max: 3, Blocking: true},
//		func(c *Coordinator, r *kapi.Request) kmsg.Response { ... })
//
// and the broker binds the table to the value that serves it when it starts:
//
//	reg.Add(apis.Bind(coordinator)...)
package kapi

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
)

// Request is one decoded request and who sent it.
type Request struct {
	Ctx context.Context
	Msg kmsg.Request
	// ClientID is the client.id of the request header (the last one the
	// connection sent when a request carries none).
	ClientID string
	// Host is the client's address without the port.
	Host string
	// Principal is who the connection authenticated as (auth.Anonymous
	// on a listener without authentication).
	Principal auth.Principal
	// Listener is the name of the listener the connection came in on.
	Listener string
	// Authz is the broker's authorizer, nil when it authorizes nothing
	// (--authorizer none): Allowed is then true without a call.
	Authz auth.Authorizer
	// Slot is the server's response slot for this request; only handlers
	// that answer in a way of their own (Serve) use it.
	Slot any
}

// Allowed reports whether the request's principal, from its host, may do
// op on res. Handlers ask it next to the work it guards and answer Kafka's
// *_AUTHORIZATION_FAILED code when it says no.
func (r *Request) Allowed(op auth.Operation, res auth.Resource) bool {
	return r.Authz == nil || r.Authz.Authorize(r.Principal, r.Host, op, res)
}

// API is one Kafka API the broker serves.
type API struct {
	Key      int16
	Min, Max int16
	// ClusterOnly APIs are advertised only by a broker that is part of a
	// cluster (a single broker still decodes them and answers with an
	// error, so a misdirected client gets an answer, not a closed
	// connection).
	ClusterOnly bool
	// Blocking handlers wait (for the disk, a raft majority, a group's
	// rebalance), so the server runs them off the connection's read loop
	// and the connection's other requests are not stuck behind them.
	Blocking bool

	// Exactly one of Handle and Serve is set: Handle answers with the
	// response it returns; Serve answers through Request.Slot itself.
	Handle func(*Request) kmsg.Response
	Serve  func(*Request)
}

// Name is the API's name as Kafka spells it.
func (a API) Name() string { return kmsg.NameForKey(a.Key) }

// Registry holds the APIs one broker serves.
type Registry struct {
	apis    map[int16]API
	cluster bool
}

// NewRegistry returns an empty registry; cluster says whether ClusterOnly
// APIs are advertised.
func NewRegistry(cluster bool) *Registry {
	return &Registry{apis: make(map[int16]API), cluster: cluster}
}

// Add registers APIs. Two handlers for one key, a handler with no function
// or with both, or an empty version range is a programming error and panics
// at start.
func (r *Registry) Add(apis ...API) {
	for _, a := range apis {
		if _, dup := r.apis[a.Key]; dup {
			panic(fmt.Sprintf("kapi: two handlers for %s (key %d)", a.Name(), a.Key))
		}
		if (a.Handle == nil) == (a.Serve == nil) {
			panic(fmt.Sprintf("kapi: %s (key %d) needs exactly one of Handle and Serve", a.Name(), a.Key))
		}
		if a.Min < 0 || a.Max < a.Min {
			panic(fmt.Sprintf("kapi: %s (key %d) has versions v%d-v%d", a.Name(), a.Key, a.Min, a.Max))
		}
		r.apis[a.Key] = a
	}
}

// Get returns the API served under key.
func (r *Registry) Get(key int16) (API, bool) {
	a, ok := r.apis[key]
	return a, ok
}

// Name is the name of a served API, or "unknown": metrics label requests
// by it, and an unserved key must not grow their label set.
func (r *Registry) Name(key int16) string {
	if a, ok := r.apis[key]; ok {
		return a.Name()
	}
	return "unknown"
}

// Keys returns the served keys in ascending order.
func (r *Registry) Keys() []int16 {
	return slices.Sorted(maps.Keys(r.apis))
}

// Versions is the ApiVersions list of the advertised APIs, by key.
func (r *Registry) Versions() []kmsg.ApiVersionsResponseApiKey {
	keys := r.Keys()
	out := make([]kmsg.ApiVersionsResponseApiKey, 0, len(keys))
	for _, k := range keys {
		a := r.apis[k]
		if a.ClusterOnly && !r.cluster {
			continue
		}
		ak := kmsg.NewApiVersionsResponseApiKey()
		ak.ApiKey, ak.MinVersion, ak.MaxVersion = k, a.Min, a.Max
		out = append(out, ak)
	}
	return out
}

// Table collects the APIs one package serves, with handlers that take the
// value serving them (a *Broker, a transaction coordinator...) as their
// first argument. Files add to it at package initialisation; Bind makes
// the APIs once that value exists.
type Table[S any] struct {
	entries []entry[S]
}

type entry[S any] struct {
	api    API
	handle func(S, *Request) kmsg.Response
	serve  func(S, *Request)
}

// Add declares an API answered by the response handle returns. It returns
// nothing useful; it returns a value so a file can declare its API with
// `var _ = table.Add(...)` beside the handler.
func (t *Table[S]) Add(api API, handle func(S, *Request) kmsg.Response) struct{} {
	t.entries = append(t.entries, entry[S]{api: api, handle: handle})
	return struct{}{}
}

// Typed adapts a handler that takes the request as its own kmsg type and
// returns its own response type to the form Add takes, so that a file
// declares its API with the handler's name alone: the registry dispatches
// on the key, so the request is always of the handler's type.
func Typed[S any, Q kmsg.Request, P kmsg.Response](h func(S, *Request, Q) P) func(S, *Request) kmsg.Response {
	return func(s S, r *Request) kmsg.Response { return h(s, r, r.Msg.(Q)) }
}

// AddServe declares an API whose handler answers through Request.Slot
// itself.
func (t *Table[S]) AddServe(api API, serve func(S, *Request)) struct{} {
	t.entries = append(t.entries, entry[S]{api: api, serve: serve})
	return struct{}{}
}

// Bind returns the table's APIs with their handlers bound to s.
func (t *Table[S]) Bind(s S) []API {
	out := make([]API, 0, len(t.entries))
	for _, e := range t.entries {
		a := e.api
		if e.handle != nil {
			h := e.handle
			a.Handle = func(r *Request) kmsg.Response { return h(s, r) }
		}
		if e.serve != nil {
			f := e.serve
			a.Serve = func(r *Request) { f(s, r) }
		}
		out = append(out, a)
	}
	return out
}

// ErrorCode is the Kafka error code of err for a response: 0 for nil, the
// code of the kerr error it wraps, else UNKNOWN_SERVER_ERROR.
func ErrorCode(err error) int16 {
	if err == nil {
		return 0
	}
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Code
	}
	return kerr.UnknownServerError.Code
}
