package broker

// InitProducerID, versions 0-4, for idempotent and transactional
// producers. An idempotent producer that passes its current id and epoch
// (v3+, KIP-360) gets the epoch bumped so it can reset its sequences; an
// exhausted epoch gets a fresh id. A transactional id is handled by the
// transaction coordinator (txn_init.go): one producer id per transactional
// id, a new epoch for every initialization, which fences older producers.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.Add(kapi.API{Key: 22, Min: 0, Max: 4, Blocking: true},
	func(b *Broker, r *kapi.Request) kmsg.Response {
		return b.handleInitProducerID(r.Ctx, r.Msg.(*kmsg.InitProducerIDRequest))
	})

func (b *Broker) handleInitProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.Version = r.Version
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		c, code := b.txnCoordinatorFor(*r.TransactionalID)
		if code != 0 {
			resp.ErrorCode = code
			return resp
		}
		resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = c.initProducerID(ctx, r)
		return resp
	}
	if r.ProducerID >= 0 && r.ProducerEpoch >= 0 && r.ProducerEpoch < math.MaxInt16-1 {
		resp.ProducerID, resp.ProducerEpoch = r.ProducerID, r.ProducerEpoch+1
		return resp
	}
	// In cluster mode every broker allocates from its own counter; the
	// node id in the low 16 bits keeps ids unique across the cluster, so
	// producers that got ids from different brokers never share a
	// partition's sequence state (newProducerID).
	id, err := b.newProducerID()
	if err != nil {
		b.log.Error("cannot allocate producer id", "err", err)
		resp.ErrorCode = kerr.KafkaStorageError.Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}

// pidAllocator hands out producer ids that are never reused, even across
// crashes: it reserves blocks of ids by durably writing the block's end
// before handing out any id of it.
type pidAllocator struct {
	path string
	mu   struct {
		sync.Mutex
		next, limit int64
	}
}

const pidBlock = 1000

func openPIDAllocator(path string) (*pidAllocator, error) {
	a := &pidAllocator{path: path}
	data, err := os.ReadFile(path)
	switch {
	case err == nil && len(data) == 8:
		a.mu.next = int64(binary.BigEndian.Uint64(data))
		a.mu.limit = a.mu.next
	case err == nil:
		return nil, fmt.Errorf("producer id file %s is %d bytes, want 8: remove it only if no idempotent producer is running", path, len(data))
	case os.IsNotExist(err):
	default:
		return nil, fmt.Errorf("cannot read producer id file: %w", err)
	}
	return a, nil
}

func (a *pidAllocator) next() (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.mu.next >= a.mu.limit {
		limit := a.mu.limit + pidBlock
		if err := writeFileAtomic(a.path, binary.BigEndian.AppendUint64(nil, uint64(limit))); err != nil {
			return 0, err
		}
		a.mu.next, a.mu.limit = a.mu.limit, limit
	}
	id := a.mu.next
	a.mu.next++
	return id, nil
}
