package broker

// WriteTxnMarkers, versions 0-1 (cluster mode only): the transaction
// coordinator of one broker asks the leader of a data partition to end a
// producer's transaction there with a COMMIT or ABORT marker.
//
// The leader writes the marker as a control batch through the partition's
// raft group (Partition.WriteMarker), so the transaction index, the last
// stable offset and the producer epoch are the same on every replica, and
// answers once the marker is committed on a majority and applied. A
// partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER; the
// coordinator looks the leader up again and retries until every marker of
// the transaction is written. A marker written twice (a retry after a
// leadership change that had committed the first one) is harmless: a
// marker ends only a transaction that is open in its partition, and the
// coordinator holds the transaction's lock until all are written, so the
// producer cannot have opened the next one in between. A marker from a
// coordinator that was deposed meanwhile cannot end the next one either:
// each marker carries its coordinator's epoch (the raft term of its
// __transaction_state partition) and the replicas refuse one older than
// a marker already written for the producer (TRANSACTION_COORDINATOR_FENCED).
//
// A single-node broker writes its markers itself and answers this key
// with INVALID_REQUEST, like the other cluster-only keys.

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/broker/txn"
)

var _ = apis.Add(kapi.API{Key: 27, Min: 0, Max: 1, ClusterOnly: true, Blocking: true}, kapi.Typed(
	func(b *Broker, r *kapi.Request, req *kmsg.WriteTxnMarkersRequest) kmsg.Response {
		// Only brokers send it: ClusterAction on the cluster, which
		// the inter-broker principal needs (or --superusers).
		if !r.Allowed(kmsg.ACLOperationClusterAction, auth.Cluster) {
			return markersDenied(req)
		}
		return b.handleWriteTxnMarkers(r.Ctx, req)
	}))

// markersDenied answers CLUSTER_AUTHORIZATION_FAILED for every partition.
func markersDenied(r *kmsg.WriteTxnMarkersRequest) *kmsg.WriteTxnMarkersResponse {
	resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	resp.Version = r.Version
	for _, m := range r.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, i := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition, rp.ErrorCode = i, kerr.ClusterAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp
}

func (b *Broker) handleWriteTxnMarkers(ctx context.Context, r *kmsg.WriteTxnMarkersRequest) *kmsg.WriteTxnMarkersResponse {
	resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	resp.Version = r.Version
	ctx, cancel := context.WithTimeout(ctx, txn.OpTimeout)
	defer cancel()
	for _, m := range r.Markers {
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		ct := storage.ControlAbort
		if m.Committed {
			ct = storage.ControlCommit
		}
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			rt.Partitions = make([]kmsg.WriteTxnMarkersResponseMarkerTopicPartition, len(t.Partitions))
			var wg sync.WaitGroup
			for j, i := range t.Partitions {
				sp := &rt.Partitions[j]
				sp.Default()
				sp.Partition = i
				b.awaitDormant(ctx, t.Topic, i)
				switch p := b.partition(t.Topic, i); {
				case b.cluster == nil:
					sp.ErrorCode = kerr.InvalidRequest.Code
				case p == nil:
					sp.ErrorCode = b.absentPartitionCode(t.Topic, i)
				default:
					// Each is a raft round trip: all at once.
					wg.Add(1)
					go func() {
						defer wg.Done()
						if err := p.WriteMarker(ctx, m.ProducerID, m.ProducerEpoch, ct, m.CoordinatorEpoch); err != nil {
							sp.ErrorCode = kapi.ErrorCode(err)
							b.log.Debug("cannot write a transaction marker", "partition", p.String(), "producer_id", m.ProducerID, "err", err)
						}
					}()
				}
			}
			wg.Wait()
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp
}
