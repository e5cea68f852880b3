package broker

import (
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/simtel/simtel/broker/storage"
)

// Idempotent producers: per partition, the broker remembers for each
// producer id its epoch and the last five batches (sequence range and base
// offset), like Kafka. A retried batch whose sequences match one of those
// is answered with the original offset and not written again; a gap in the
// sequence is OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is fenced.
//
// The state is derived from the log: at startup it is rebuilt by scanning
// the batch headers, so it survives restarts with no file of its own.

const producerWindow = 5

type seqBatch struct {
	firstSeq, lastSeq int32
	baseOffset        int64
}

type producerEntry struct {
	epoch  int16
	recent [producerWindow]seqBatch
	n      int // batches recorded; recent[(n-1)%5] is the newest
}

func (e *producerEntry) last() seqBatch { return e.recent[(e.n-1)%producerWindow] }

func (e *producerEntry) push(b seqBatch) {
	e.recent[e.n%producerWindow] = b
	e.n++
}

func nextSeq(s int32) int32 {
	if s == math.MaxInt32 {
		return 0
	}
	return s + 1
}

func batchSeqs(h storage.BatchHeader) (int32, int32) {
	last := h.BaseSequence + h.LastOffsetDelta
	if last < h.BaseSequence { // wrapped past MaxInt32
		last = h.LastOffsetDelta - (math.MaxInt32 - h.BaseSequence) - 1
	}
	return h.BaseSequence, last
}

// checkSequencesLocked returns the original base offset if the batches are
// a retry of the newest batches already written, or an error code.
func (p *Partition) checkSequencesLocked(hdrs []storage.BatchHeader) (int64, error) {
	// Simulate on copies so a request with several batches is all-or-none.
	sim := map[int64]producerEntry{}
	for i, h := range hdrs {
		if h.ProducerID < 0 || h.IsControl() {
			// A transaction marker has no sequence; the coordinator
			// writes it through raft (observeBatchLocked adopts its epoch).
			continue
		}
		e, ok := sim[h.ProducerID]
		if !ok {
			if cur := p.mu.producers[h.ProducerID]; cur != nil {
				e, ok = *cur, true
			}
		}
		first, last := batchSeqs(h)
		switch {
		case ok && h.ProducerEpoch < e.epoch:
			// Also when the epoch came from a transaction marker only
			// (e.n == 0): the coordinator fenced this producer.
			return -1, fmt.Errorf("%w: producer %d epoch %d is older than %d", kerr.InvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, e.epoch)
		case !ok || e.n == 0:
			// Unknown producer (new, or its state went with retention):
			// accept whatever sequence it starts at.
		case h.ProducerEpoch > e.epoch:
			if first != 0 {
				return -1, fmt.Errorf("%w: producer %d new epoch %d must start at sequence 0, got %d", kerr.OutOfOrderSequenceNumber, h.ProducerID, h.ProducerEpoch, first)
			}
			e = producerEntry{}
		default:
			for k := 0; k < min(e.n, producerWindow); k++ {
				r := e.recent[k]
				if r.firstSeq == first && r.lastSeq == last {
					if len(hdrs) == 1 || i == 0 {
						return r.baseOffset, nil
					}
					return -1, fmt.Errorf("%w: producer %d batch %d-%d is a duplicate inside a larger request", kerr.DuplicateSequenceNumber, h.ProducerID, first, last)
				}
			}
			if want := nextSeq(e.last().lastSeq); first != want {
				return -1, fmt.Errorf("%w: producer %d sent sequence %d, expected %d", kerr.OutOfOrderSequenceNumber, h.ProducerID, first, want)
			}
		}
		e.epoch = h.ProducerEpoch
		e.push(seqBatch{firstSeq: first, lastSeq: last})
		sim[h.ProducerID] = e
	}
	return -1, nil
}

// recordSequencesLocked remembers the batches just appended at base.
func (p *Partition) recordSequencesLocked(hdrs []storage.BatchHeader, base int64) {
	off := base
	for _, h := range hdrs {
		p.observeBatchLocked(h, off)
		off += int64(h.LastOffsetDelta) + 1
	}
}

func (p *Partition) observeBatchLocked(h storage.BatchHeader, base int64) {
	if h.ProducerID < 0 {
		return
	}
	if h.IsControl() {
		// A transaction marker carries no sequence. Written with a newer
		// epoch (the coordinator fenced the producer), it makes that
		// epoch current here, so the fenced producer's batches are
		// refused; the new producer starts its sequences afresh.
		if e := p.mu.producers[h.ProducerID]; e == nil || h.ProducerEpoch > e.epoch {
			p.mu.producers[h.ProducerID] = &producerEntry{epoch: h.ProducerEpoch}
		}
		return
	}
	e := p.mu.producers[h.ProducerID]
	if e == nil || h.ProducerEpoch > e.epoch {
		e = &producerEntry{epoch: h.ProducerEpoch}
		p.mu.producers[h.ProducerID] = e
	}
	first, last := batchSeqs(h)
	e.push(seqBatch{firstSeq: first, lastSeq: last, baseOffset: base})
}

func (p *Partition) rebuildProducers() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.ScanBatches(p.log.StartOffset(), func(h storage.BatchHeader) error {
		p.observeBatchLocked(h, h.BaseOffset)
		return nil
	})
}
