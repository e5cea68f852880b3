package broker

// Fetch, versions 4-12.
//
// Long polling: the request registers one wake-up channel with every
// partition it reads, then builds the response; if fewer than MinBytes are
// available it waits for a high-watermark advance on any of them, the
// MaxWait deadline or the connection closing, and builds again.
// Fetch sessions (KIP-227) are not kept: SessionID 0 in the response tells
// the client to send full requests, which every client supports.
// Record bytes never pass through user space (see zerocopy.go).
//
// Isolation level read_committed (1) is served up to the last stable
// offset (the first offset of the earliest open transaction, else the high
// watermark) and gets the aborted transactions overlapping the returned
// batches, from the log's transaction index; read_uncommitted is served up
// to the high watermark. Both see LastStableOffset.

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/storage"

	"github.com/simtel/simtel/broker/kapi"
)

var _ = apis.AddServe(kapi.API{Key: 1, Min: 4, Max: 12, Blocking: true},
	func(b *Broker, r *kapi.Request) { b.handleFetch(r.Ctx, r.Msg.(*kmsg.FetchRequest), r.Slot.(*pending)) })

const defaultFetchMaxBytes = 50 << 20

func (b *Broker) handleFetch(ctx context.Context, r *kmsg.FetchRequest, p *pending) {
	deadline := time.Now().Add(time.Duration(max(r.MaxWaitMillis, 0)) * time.Millisecond)
	wake := make(chan struct{}, 1)
	var parts []*partition.Partition
	for _, t := range r.Topics {
		for _, rp := range t.Partitions {
			if part := b.partition(t.Topic, rp.Partition); part != nil {
				part.AddWaiter(wake)
				parts = append(parts, part)
			}
		}
	}
	defer func() {
		for _, part := range parts {
			part.RemoveWaiter(wake)
		}
	}()

	var timer *time.Timer
	for {
		resp, m, total, errs := b.readFetch(r)
		done := total >= int64(r.MinBytes) || errs || !time.Now().Before(deadline) || ctx.Err() != nil
		if done {
			wire, err := buildFetchWire(resp, p.corr, m)
			if err != nil {
				b.log.Error("cannot encode fetch response", "err", err)
				for _, res := range m.results {
					res.Release()
				}
				p.closeConn = true
				p.finish(nil)
				return
			}
			b.metrics.fetchedBytes.Add(float64(total))
			p.fetch = wire
			close(p.done)
			return
		}
		for _, res := range m.results {
			res.Release()
		}
		if timer == nil {
			timer = time.NewTimer(time.Until(deadline))
			defer timer.Stop()
		}
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
		}
	}
}

// readFetch builds a fetch response from the current state. It reports the
// record bytes found and whether any partition had an error (an error is
// answered at once, as Kafka does).
func (b *Broker) readFetch(r *kmsg.FetchRequest) (*kmsg.FetchResponse, *markerSet, int64, bool) {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	resp.Version = r.Version
	m := newMarkerSet()
	if r.SessionID != 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp, m, 0, true
	}
	maxBytes := int64(r.MaxBytes)
	if maxBytes <= 0 {
		maxBytes = defaultFetchMaxBytes
	}
	var total int64
	anyErr := false
	resp.Topics = make([]kmsg.FetchResponseTopic, len(r.Topics))
	for i, rt := range r.Topics {
		st := &resp.Topics[i]
		st.Topic = rt.Topic
		st.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		for j, rp := range rt.Partitions {
			sp := &st.Partitions[j]
			sp.Default()
			sp.Partition = rp.Partition
			// Empty, not null: librdkafka rejects a null record set.
			sp.RecordBatches = []byte{}
			part := b.partition(rt.Topic, rp.Partition)
			if part == nil {
				sp.ErrorCode = b.absentPartitionCode(rt.Topic, rp.Partition)
				anyErr = true
				continue
			}
			if code := part.CheckLeaderEpoch(rp.CurrentLeaderEpoch); code != 0 {
				sp.ErrorCode = code
				anyErr = true
				continue
			}
			hw := part.HighWatermark()
			lso := part.LastStableOffset(hw)
			start := part.Log().StartOffset()
			sp.HighWatermark = hw
			sp.LastStableOffset = lso
			sp.LogStartOffset = start
			// read_committed reads up to the last stable offset only.
			upper := hw
			if r.IsolationLevel == 1 {
				upper = lso
				sp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
			}
			if rp.FetchOffset < start || rp.FetchOffset > part.Log().EndOffset() {
				sp.ErrorCode = kerr.OffsetOutOfRange.Code
				anyErr = true
				continue
			}
			if rp.FetchOffset >= upper {
				continue
			}
			limit := min(int64(rp.PartitionMaxBytes), maxBytes-total)
			if limit <= 0 {
				if total > 0 {
					continue
				}
				limit = 1 // KIP-74: the first batch goes out whatever the limits
			}
			res, err := part.Log().Read(rp.FetchOffset, limit, upper)
			if err != nil {
				if errors.Is(err, storage.ErrOffsetOutOfRange) {
					sp.ErrorCode = kerr.OffsetOutOfRange.Code
				} else {
					b.log.Error("cannot read partition", "topic", rt.Topic, "partition", rp.Partition, "offset", rp.FetchOffset, "err", err)
					sp.ErrorCode = kerr.KafkaStorageError.Code
				}
				anyErr = true
				continue
			}
			if res.Bytes == 0 {
				res.Release()
				continue
			}
			total += res.Bytes
			if r.IsolationLevel == 1 {
				// The client drops the batches of these producers from
				// each one's first offset up to its abort marker.
				for _, a := range part.Log().AbortedTxns(min(rp.FetchOffset, res.FirstOffset), res.LastOffset) {
					at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
					at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
					sp.AbortedTransactions = append(sp.AbortedTransactions, at)
				}
			}
			sp.RecordBatches = m.next(res)
		}
	}
	return resp, m, total, anyErr
}
