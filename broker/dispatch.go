package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/group"
)

type versionRange struct{ min, max int16 }

// supportedVersions is what ApiVersions advertises. Every key here has a
// handler in dispatch; the ranges are at least Kafka 2.8's where the
// semantics are implemented. Produce and Fetch start at v3/v4 because only
// record batches (magic 2) are stored.
var supportedVersions = map[int16]versionRange{
	0:  {3, 9},  // Produce
	1:  {4, 12}, // Fetch
	2:  {1, 6},  // ListOffsets
	3:  {0, 11}, // Metadata
	8:  {0, 8},  // OffsetCommit
	9:  {0, 7},  // OffsetFetch
	10: {0, 3},  // FindCoordinator
	11: {0, 7},  // JoinGroup
	12: {0, 4},  // Heartbeat
	13: {0, 4},  // LeaveGroup
	14: {0, 5},  // SyncGroup
	15: {0, 5},  // DescribeGroups
	16: {0, 5},  // ListGroups (v4 state filter, v5 type filter and GroupType)
	18: {0, 4},  // ApiVersions (v4 only relaxes feature-version rules)
	19: {0, 7},  // CreateTopics
	20: {0, 6},  // DeleteTopics
	21: {0, 2},  // DeleteRecords
	22: {0, 4},  // InitProducerID
	23: {0, 4},  // OffsetForLeaderEpoch
	24: {0, 4},  // AddPartitionsToTxn
	25: {0, 3},  // AddOffsetsToTxn
	26: {0, 3},  // EndTxn
	27: {0, 1},  // WriteTxnMarkers (cluster mode only: broker to broker)
	28: {0, 3},  // TxnOffsetCommit
	32: {0, 4},  // DescribeConfigs
	33: {0, 2},  // AlterConfigs
	37: {0, 3},  // CreatePartitions
	42: {0, 2},  // DeleteGroups
	44: {0, 1},  // IncrementalAlterConfigs
	45: {0, 0},  // AlterPartitionAssignments (cluster mode only)
	46: {0, 0},  // ListPartitionReassignments (cluster mode only)
	47: {0, 0},  // OffsetDelete
	60: {0, 0},  // DescribeCluster
	65: {0, 0},  // DescribeTransactions
	66: {0, 1},  // ListTransactions
}

func apiName(key int16) string {
	if _, ok := supportedVersions[key]; !ok {
		return "unknown"
	}
	return kmsg.NameForKey(key)
}

// dispatch runs one decoded request. It must eventually call p.finish
// (or set p.fetch / p.noResponse and close p.done).
func (b *Broker) dispatch(c *conn, req kmsg.Request, p *pending) {
	ctx := c.ctx
	switch r := req.(type) {
	case *kmsg.ProduceRequest:
		b.handleProduce(ctx, r, p)
	case *kmsg.FetchRequest:
		go b.handleFetch(ctx, r, p)
	case *kmsg.JoinGroupRequest, *kmsg.SyncGroupRequest:
		// These block until the group's rebalance moves on.
		gctx := group.WithClient(ctx, c.clientID, c.remoteHost())
		go func() { p.finish(b.handleGroupRequest(gctx, req)) }()
	case *kmsg.OffsetCommitRequest, *kmsg.OffsetDeleteRequest, *kmsg.DeleteGroupsRequest:
		// These wait for the disk (single node) or a raft majority; run
		// them off the read loop so a connection's other requests are
		// not stuck behind them.
		go func() { p.finish(b.handleGroupRequest(ctx, req)) }()
	case *kmsg.HeartbeatRequest, *kmsg.LeaveGroupRequest, *kmsg.OffsetFetchRequest,
		*kmsg.DescribeGroupsRequest, *kmsg.ListGroupsRequest:
		p.finish(b.handleGroupRequest(ctx, req))
	case *kmsg.ApiVersionsRequest:
		p.finish(b.apiVersionsResponse(r.Version, false))
	case *kmsg.MetadataRequest:
		p.finish(b.handleMetadata(ctx, r))
	case *kmsg.ListOffsetsRequest:
		p.finish(b.handleListOffsets(r))
	case *kmsg.FindCoordinatorRequest:
		p.finish(b.handleFindCoordinator(r))
	case *kmsg.CreateTopicsRequest:
		p.finish(b.handleCreateTopics(r))
	case *kmsg.DeleteTopicsRequest:
		p.finish(b.handleDeleteTopics(r))
	case *kmsg.CreatePartitionsRequest:
		p.finish(b.handleCreatePartitions(r))
	case *kmsg.DeleteRecordsRequest:
		go func() { p.finish(b.handleDeleteRecords(ctx, r)) }()
	case *kmsg.InitProducerIDRequest:
		// A transactional id's first init fsyncs; an init that fences
		// an open transaction writes its markers.
		go func() { p.finish(b.handleInitProducerID(ctx, r)) }()
	case *kmsg.AddPartitionsToTxnRequest:
		go func() { p.finish(b.handleAddPartitionsToTxn(ctx, r)) }()
	case *kmsg.AddOffsetsToTxnRequest:
		go func() { p.finish(b.handleAddOffsetsToTxn(ctx, r)) }()
	case *kmsg.EndTxnRequest:
		go func() { p.finish(b.handleEndTxn(ctx, r)) }()
	case *kmsg.WriteTxnMarkersRequest:
		go func() { p.finish(b.handleWriteTxnMarkers(ctx, r)) }()
	case *kmsg.TxnOffsetCommitRequest:
		go func() { p.finish(b.handleTxnOffsetCommit(ctx, r)) }()
	case *kmsg.DescribeTransactionsRequest:
		p.finish(b.handleDescribeTransactions(r))
	case *kmsg.ListTransactionsRequest:
		p.finish(b.handleListTransactions(r))
	case *kmsg.OffsetForLeaderEpochRequest:
		p.finish(b.handleOffsetForLeaderEpoch(r))
	case *kmsg.DescribeConfigsRequest:
		p.finish(b.handleDescribeConfigs(r))
	case *kmsg.AlterConfigsRequest:
		p.finish(b.handleAlterConfigs(r))
	case *kmsg.IncrementalAlterConfigsRequest:
		p.finish(b.handleIncrementalAlterConfigs(r))
	case *kmsg.DescribeClusterRequest:
		p.finish(b.handleDescribeCluster(r))
	case *kmsg.AlterPartitionAssignmentsRequest:
		go func() { p.finish(b.handleAlterPartitionAssignments(ctx, r)) }()
	case *kmsg.ListPartitionReassignmentsRequest:
		p.finish(b.handleListPartitionReassignments(r))
	default:
		// supportedVersions and this switch disagree: a bug, not bad input.
		b.log.Error("no handler for supported api", "api", apiName(req.Key()))
		p.closeConn = true
		p.finish(nil)
	}
}
