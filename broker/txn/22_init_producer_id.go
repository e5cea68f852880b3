package txn

// InitProducerID, versions 0-4, for idempotent and transactional
// producers. An idempotent producer that passes its current id and epoch
// (v3+, KIP-360) gets the epoch bumped so it can reset its sequences; an
// exhausted epoch gets a fresh id. A transactional id is handled by the
// transaction coordinator (init.go): one producer id per transactional
// id, a new epoch for every initialization, which fences older producers.

import (
	"context"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 22, Min: 0, Max: 4, Blocking: true}, kapi.Typed(
	func(s *Coordinators, r *kapi.Request, req *kmsg.InitProducerIDRequest) kmsg.Response {
		// Write on the transactional id; an idempotent producer needs
		// IdempotentWrite on the cluster or Write on some topic.
		switch {
		case req.TransactionalID != nil && !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(*req.TransactionalID)):
			return initProducerIDError(req, kerr.TransactionalIDAuthorizationFailed.Code)
		case req.TransactionalID == nil && !r.Allowed(kmsg.ACLOperationIdempotentWrite, auth.Cluster) &&
			!r.AllowedAny(kmsg.ACLOperationWrite, kmsg.ACLResourceTypeTopic):
			return initProducerIDError(req, kerr.ClusterAuthorizationFailed.Code)
		}
		return s.handleInitProducerID(r.Ctx, req)
	}))

func initProducerIDError(r *kmsg.InitProducerIDRequest, code int16) *kmsg.InitProducerIDResponse {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.Version = r.Version
	resp.ProducerID, resp.ProducerEpoch, resp.ErrorCode = -1, -1, code
	return resp
}

func (s *Coordinators) handleInitProducerID(ctx context.Context, r *kmsg.InitProducerIDRequest) *kmsg.InitProducerIDResponse {
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.Version = r.Version
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		c, code := s.coordinatorFor(*r.TransactionalID)
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
	id, err := s.newProducerID()
	if err != nil {
		s.log.Error("cannot allocate producer id", "err", err)
		resp.ErrorCode = kerr.KafkaStorageError.Code
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp
}
