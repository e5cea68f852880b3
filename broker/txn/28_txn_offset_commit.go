package txn

// TxnOffsetCommit, versions 0-3: offsets a transactional producer commits
// for a consumer group inside its transaction (after AddOffsetsToTxn).
// They are kept with the transaction's state and reach the group only
// when the transaction commits; an abort drops them. v3 (KIP-447) also
// checks the group generation and member, like OffsetCommit, so a member
// that lost its partitions in a rebalance cannot commit for them.

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
)

var _ = APIs.Add(kapi.API{Key: 28, Min: 0, Max: 3, Blocking: true}, kapi.Typed(
	func(s *Coordinators, r *kapi.Request, req *kmsg.TxnOffsetCommitRequest) kmsg.Response {
		if r.Authz == nil {
			return s.handleTxnOffsetCommit(r.Ctx, req)
		}
		// The brokers' own forms (a member id of theirs, generation
		// -1) need ClusterAction on the cluster; a client's, Write on
		// the transactional id, Read on the group and on each topic.
		code := int16(0)
		switch {
		case req.Generation == -1 && strings.HasPrefix(req.MemberID, internalMemberPrefix):
			if !r.Allowed(kmsg.ACLOperationClusterAction, auth.Cluster) {
				code = kerr.ClusterAuthorizationFailed.Code
			}
		case !r.Allowed(kmsg.ACLOperationWrite, auth.TransactionalID(req.TransactionalID)):
			code = kerr.TransactionalIDAuthorizationFailed.Code
		case !r.Allowed(kmsg.ACLOperationRead, auth.Group(req.Group)):
			code = kerr.GroupAuthorizationFailed.Code
		default:
			allowed, denied := kapi.SplitTopics(r, kmsg.ACLOperationRead, req.Topics, func(t *kmsg.TxnOffsetCommitRequestTopic) string { return t.Topic })
			if denied == nil {
				return s.handleTxnOffsetCommit(r.Ctx, req)
			}
			sub, refused := *req, *req
			sub.Topics, refused.Topics = allowed, denied
			resp := s.handleTxnOffsetCommit(r.Ctx, &sub)
			resp.Topics = append(resp.Topics, txnOffsetCommitError(&refused, kerr.TopicAuthorizationFailed.Code).Topics...)
			return resp
		}
		if code == 0 {
			return s.handleTxnOffsetCommit(r.Ctx, req)
		}
		return txnOffsetCommitError(req, code)
	}))

// internalMemberPrefix begins the member ids of the TxnOffsetCommit
// requests brokers send each other (txnForwardMember, txnApplyMember,
// txnPendingMember); a client's member id never begins with a NUL.
const internalMemberPrefix = "\x00simtel-txn-"

// txnOffsetCommitError answers every partition of r with code.
func txnOffsetCommitError(r *kmsg.TxnOffsetCommitRequest, code int16) *kmsg.TxnOffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	resp.Version = r.Version
	for _, t := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = t.Topic
		for _, p := range t.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = p.Partition, code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

const maxTxnOffsetMetadataBytes = 4096

func (s *Coordinators) handleTxnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	resp.Version = r.Version
	if s.cfg.Clustered && r.MemberID == txnPendingMember && r.Generation == -1 {
		resp.Topics = s.pendingForGroup(r.Group)
		return resp
	}
	codes := newCodes(r.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) int { return len(t.Partitions) })
	var code int16
	switch {
	case !s.cfg.Clustered:
		code = s.single.txnOffsetCommit(ctx, r, codes)
	case r.MemberID == txnApplyMember && r.Generation == -1:
		code = s.applyOffsets(r)
	case r.MemberID == txnForwardMember && r.Generation == -1:
		code = s.forwardedTxnOffsetCommit(ctx, r, codes)
	default:
		code = s.clusterTxnOffsetCommit(ctx, r, codes)
	}
	if code != 0 {
		setCodes(codes, code)
	}
	for i, t := range r.Topics {
		st := kmsg.NewTxnOffsetCommitResponseTopic()
		st.Topic = t.Topic
		for j, p := range t.Partitions {
			sp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = p.Partition, codes[i][j]
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

func (c *coordinator) txnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest, codes [][]int16) int16 {
	ctx, e, unlock, code := c.lockGroupEntry(ctx, r.TransactionalID, r.Group)
	if code != 0 {
		return code
	}
	defer unlock()
	if err := checkProducerLocked(e, r.ProducerID, r.ProducerEpoch, r.Version, 99); err != nil {
		// Like Kafka, this API reports fencing as INVALID_PRODUCER_EPOCH.
		return err.Code
	}
	if e.meta.Status != txnOngoing || !e.meta.hasGroup(r.Group) {
		return kerr.InvalidTxnState.Code
	}
	if r.Version >= 3 && !c.clustered { // cluster mode: checked at the group's coordinator
		gc, gcode := c.s.b.GroupCoordinator(r.Group)
		if gcode != 0 {
			return gcode
		}
		if err := gc.ValidateTxnOffsetCommit(r.Group, r.Generation, r.MemberID, r.InstanceID); err != nil {
			return err.Code
		}
	}
	next := e.meta.clone()
	n := 0
	for i, t := range r.Topics {
		for j, p := range t.Partitions {
			meta := ""
			if p.Metadata != nil {
				meta = *p.Metadata
			}
			switch {
			case !c.s.b.PartitionKnown(t.Topic, p.Partition):
				codes[i][j] = kerr.UnknownTopicOrPartition.Code
				continue
			case len(meta) > maxTxnOffsetMetadataBytes:
				codes[i][j] = kerr.OffsetMetadataTooLarge.Code
				continue
			}
			epoch := int32(-1)
			if r.Version >= 2 {
				epoch = p.LeaderEpoch
			}
			next.setOffset(txnOffset{Group: r.Group, Topic: t.Topic, Partition: p.Partition, Offset: p.Offset, LeaderEpoch: epoch, Metadata: meta})
			n++
		}
	}
	if n == 0 {
		return 0
	}
	if err := c.persistLocked(ctx, e, next); err != nil {
		c.log.Error("cannot record transactional offsets", "transactional_id", e.id, "group", r.Group, "err", err)
		return kerr.CoordinatorNotAvailable.Code
	}
	return 0
}

// txnForwardMember is the member id of a TxnOffsetCommit a group
// coordinator passes on to the transaction coordinator after checking the
// member there. The member, not the request version, marks it: the peer
// client sends every request at the highest version both sides support.
const txnForwardMember = "\x00simtel-txn-forward"

// forwardedTxnOffsetCommit is the transaction coordinator's side of
// txnForwardMember: the group's coordinator checked the member already.
func (s *Coordinators) forwardedTxnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest, codes [][]int16) int16 {
	return s.withCoordinator(r.TransactionalID, func(c *coordinator) int16 { return c.txnOffsetCommit(ctx, r, codes) })
}

// clusterTxnOffsetCommit handles TxnOffsetCommit in cluster mode. The
// client sends it to the group's coordinator, which checks the member's
// generation (v3) and passes the offsets to the transactional id's
// coordinator (itself, or a v2 request to that broker), where they join
// the replicated transaction state.
func (s *Coordinators) clusterTxnOffsetCommit(ctx context.Context, r *kmsg.TxnOffsetCommitRequest, codes [][]int16) int16 {
	if r.Group == "" {
		return kerr.InvalidGroupID.Code
	}
	gc, gcode := s.b.GroupCoordinator(r.Group)
	if r.Version >= 3 {
		if gcode != 0 {
			return gcode
		}
		if err := gc.ValidateTxnOffsetCommit(r.Group, r.Generation, r.MemberID, r.InstanceID); err != nil {
			return err.Code
		}
	}
	c, code := s.coordinatorFor(r.TransactionalID)
	switch {
	case c != nil:
		return c.txnOffsetCommit(ctx, r, codes)
	case code != kerr.NotCoordinator.Code:
		return code
	case gcode != 0:
		return gcode // neither coordinator is here
	}
	n := s.statePartitions()
	id, addr, ok := s.b.LeaderOf(StateTopic, partitionOf(r.TransactionalID, n))
	if n == 0 || !ok || id == s.cfg.NodeID {
		return kerr.CoordinatorNotAvailable.Code
	}
	fwd := *r
	fwd.Generation, fwd.MemberID, fwd.InstanceID = -1, txnForwardMember, nil
	rctx, cancel := context.WithTimeout(ctx, OpTimeout)
	defer cancel()
	// Marked before the coordinator has them, so there is no moment
	// when neither broker reports them pending.
	s.setForwarded(r.TransactionalID, r.Group, r.Topics, true)
	kr, err := s.peerRequest(rctx, addr, &fwd)
	if err != nil {
		s.log.Warn("cannot pass transactional offsets to the transaction coordinator", "transactional_id", r.TransactionalID, "broker", addr, "err", err)
		s.setForwarded(r.TransactionalID, r.Group, nil, false)
		return kerr.CoordinatorNotAvailable.Code
	}
	resp := kr.(*kmsg.TxnOffsetCommitResponse)
	failed := false
	for i, t := range resp.Topics {
		for j, p := range t.Partitions {
			if i < len(codes) && j < len(codes[i]) {
				codes[i][j] = p.ErrorCode
			}
			failed = failed || p.ErrorCode != 0
		}
	}
	if failed {
		// Not recorded there: nothing will clear the mark (the client
		// retries, which marks again).
		s.setForwarded(r.TransactionalID, r.Group, nil, false)
	}
	return 0
}
