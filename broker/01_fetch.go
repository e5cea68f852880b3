package broker

// Fetch, versions 4-12.
//
// Long polling: the request registers one wake-up channel with every
// partition it reads, then builds the response; if fewer than MinBytes are
// available it waits for a high-watermark advance on any of them, the
// MaxWait deadline or the connection closing, and builds again.
// Fetch sessions (KIP-227) are not kept: SessionID 0 in the response tells
// the client to send full requests, which every client supports.
// Record bytes never pass through user space (see Zero-copy responses
// below).
//
// Isolation level read_committed (1) is served up to the last stable
// offset (the first offset of the earliest open transaction, else the high
// watermark) and gets the aborted transactions overlapping the returned
// batches, from the log's transaction index; read_uncommitted is served up
// to the high watermark. Both see LastStableOffset.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/kapi"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/broker/storage"
)

var _ = apis.AddServe(kapi.API{Key: 1, Min: 4, Max: 12, Blocking: true},
	func(b *Broker, r *kapi.Request) {
		req := r.Msg.(*kmsg.FetchRequest)
		denied := kapi.DeniedTopics(r, kmsg.ACLOperationRead, req.Topics, func(t *kmsg.FetchRequestTopic) string { return t.Topic })
		b.handleFetch(r.Ctx, req, r.Slot.(*server.Slot), denied)
	})

const defaultFetchMaxBytes = 50 << 20

// handleFetch answers TOPIC_AUTHORIZATION_FAILED for the denied topics
// (no Read).
func (b *Broker) handleFetch(ctx context.Context, r *kmsg.FetchRequest, p *server.Slot, denied map[string]bool) {
	deadline := time.Now().Add(time.Duration(max(r.MaxWaitMillis, 0)) * time.Millisecond)
	wake := make(chan struct{}, 1)
	var parts []*partition.Partition
	for _, t := range r.Topics {
		for _, rp := range t.Partitions {
			if part := b.readPartition(t.Topic, rp.Partition); part != nil && !denied[t.Topic] {
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
		resp, m, total, errs := b.readFetch(r, denied)
		done := total >= int64(r.MinBytes) || errs || !time.Now().Before(deadline) || ctx.Err() != nil
		if done {
			wire, err := buildFetchWire(resp, p.Corr(), m)
			if err != nil {
				b.log.Error("cannot encode fetch response", "err", err)
				for _, res := range m.results {
					res.Release()
				}
				p.Refuse()
				return
			}
			b.metrics.fetchedBytes.Add(float64(total))
			p.FinishFetch(wire)
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
func (b *Broker) readFetch(r *kmsg.FetchRequest, denied map[string]bool) (*kmsg.FetchResponse, *markerSet, int64, bool) {
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
			part, code := b.readablePartition(denied, rt.Topic, rp.Partition, rp.CurrentLeaderEpoch)
			if code != 0 {
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

// Zero-copy responses.
//
// kmsg encodes the whole FetchResponse, but the record bytes must go from
// the segment files to the socket without passing through user space. So
// each partition's RecordBatches is first set to a 16-byte marker unique to
// this response; after kmsg encodes the response, the marker and its length
// prefix are cut out and replaced by the real length and the file ranges.
// Everything else in the response is kmsg's encoding, byte for byte.

const markerLen = 16

type markerSet struct {
	seed    uint64
	results []*storage.ReadResult
}

func (m *markerSet) next(r *storage.ReadResult) []byte {
	b := make([]byte, markerLen)
	binary.BigEndian.PutUint64(b, m.seed)
	binary.BigEndian.PutUint64(b[8:], uint64(len(m.results)))
	m.results = append(m.results, r)
	return b
}

func newMarkerSet() *markerSet { return &markerSet{seed: rand.Uint64() | 1} }

// buildFetchWire encodes resp (whose partitions with data carry markers from
// m) and splices in the file ranges.
func buildFetchWire(resp *kmsg.FetchResponse, corr int32, m *markerSet) (*server.FetchWire, error) {
	buf := binary.BigEndian.AppendUint32(nil, uint32(corr))
	flexible := resp.IsFlexible()
	if flexible {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	w := server.NewFetchWire(m.results)
	pos := 0
	for i, r := range m.results {
		marker := make([]byte, markerLen)
		binary.BigEndian.PutUint64(marker, m.seed)
		binary.BigEndian.PutUint64(marker[8:], uint64(i))
		idx := bytes.Index(buf[pos:], marker)
		if idx < 0 {
			return nil, errors.New("fetch response marker not found")
		}
		idx += pos
		prefix := 4
		if flexible {
			prefix = 1 // uvarint(16+1)
		}
		w.AddBytes(buf[pos : idx-prefix])
		var lenBuf []byte
		if flexible {
			lenBuf = binary.AppendUvarint(nil, uint64(r.Bytes)+1)
		} else {
			lenBuf = binary.BigEndian.AppendUint32(nil, uint32(r.Bytes))
		}
		w.AddBytes(lenBuf)
		for _, c := range r.Chunks {
			w.AddChunk(c)
		}
		pos = idx + markerLen
	}
	w.AddBytes(buf[pos:])
	return w, nil
}
