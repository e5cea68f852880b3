package txn

// AddOffsetsToTxn, versions 0-3: a transactional producer announces that
// its transaction will commit offsets of a consumer group (TxnOffsetCommit
// follows). Those offsets become visible to the group only when the
// transaction commits.

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 25, Min: 0, Max: 3, Blocking: true}, kapi.Reply(
	func(s *Coordinators, r *kapi.Request, req *kmsg.AddOffsetsToTxnRequest, resp *kmsg.AddOffsetsToTxnResponse) {
		switch {
		case !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(req.TransactionalID)):
			resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		case !r.Allowed(kmsg.ACLOperationRead, auth.Group(req.Group)):
			resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		default:
			resp.ErrorCode = s.withCoordinator(req.TransactionalID, func(c *coordinator) int16 { return c.addOffsets(r.Ctx, req) })
		}
	}))

func (c *coordinator) addOffsets(ctx context.Context, r *kmsg.AddOffsetsToTxnRequest) int16 {
	ctx, e, unlock, code := c.lockGroupEntry(ctx, r.TransactionalID, r.Group)
	if code != 0 {
		return code
	}
	defer unlock()
	next, code := c.ongoingLocked(ctx, e, r.ProducerID, r.ProducerEpoch, r.Version)
	if code != 0 {
		return code
	}
	if next.hasGroup(r.Group) {
		return 0
	}
	next.Groups = append(next.Groups, r.Group)
	if err := c.persistLocked(ctx, e, next); err != nil {
		c.log.Error("cannot add a group to transaction", "transactional_id", e.id, "group", r.Group, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}
