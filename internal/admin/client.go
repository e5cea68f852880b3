// Package admin runs the operations behind `simtel topic`, `simtel group`
// and `simtel cluster` on any Kafka-compatible cluster, over franz-go's
// kadm: it returns plain results for the command line to print, and
// errors that say what could not be done.
//
// Every method takes the caller's context and bounds nothing itself; the
// caller sets the deadline. A failure to talk to any broker at all is an
// *UnreachableError, so the caller can suggest checking the address.
package admin

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Client holds one Kafka client and its admin client.
type Client struct {
	cl  *kgo.Client
	adm *kadm.Client
}

// New returns a client that seeds from brokers, with opts added (the
// connection's TLS and SASL). It dials nothing yet.
func New(brokers []string, opts ...kgo.Opt) (*Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("cannot create client for %s: %w", strings.Join(brokers, ","), err)
	}
	return &Client{cl: cl, adm: kadm.NewClient(cl)}, nil
}

// waitAsLong gives the admin requests that carry a timeout (creating and
// deleting topics, adding partitions) the caller's deadline. kadm's 15 s
// default plus kgo's 10 s for the connection is when the client gave up
// waiting and sent the request again: a topic of 10,000 replicated
// partitions takes longer than that to create or delete, and the second
// request failed (TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION) where
// the first had done its work.
func (c *Client) waitAsLong(ctx context.Context) {
	if d, ok := ctx.Deadline(); ok {
		if ms := time.Until(d).Milliseconds(); ms > defaultTimeoutMillis {
			c.adm.SetTimeoutMillis(int32(min(ms, math.MaxInt32)))
		}
	}
}

// defaultTimeoutMillis is kadm's.
const defaultTimeoutMillis = 15000

// Close closes the connections.
func (c *Client) Close() { c.cl.Close() }

// UnreachableError is a request that failed because no broker answered:
// the connection was refused or the context's deadline passed first.
// Error and Unwrap are those of Err.
type UnreachableError struct {
	Err error
}

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// reach marks err as an *UnreachableError when no broker answered. kgo
// wraps the dial error and kadm's *ShardErrors unwraps to every shard's
// error, so errors.Is sees through both.
func reach(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) {
		return &UnreachableError{Err: err}
	}
	return err
}
