package partition

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
	epoch int16
	// coordEpoch is the highest transaction coordinator epoch among the
	// producer's markers here (in a cluster, the raft term of the
	// coordinator's state partition): a marker with a lower one comes
	// from a coordinator that was deposed meanwhile and is refused.
	coordEpoch int32
	recent     [producerWindow]seqBatch
	n          int // batches recorded; recent[(n-1)%5] is the newest
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

// recordSequencesLocked remembers the batches of data (parsed as hdrs)
// just appended at base.
func (p *Partition) recordSequencesLocked(data []byte, hdrs []storage.BatchHeader, base int64) {
	off, pos := base, 0
	for _, h := range hdrs {
		var control []byte
		if h.IsControl() && pos+int(h.Length) <= len(data) {
			control = data[pos : pos+int(h.Length)]
		}
		p.observeBatchLocked(h, off, control)
		off += int64(h.LastOffsetDelta) + 1
		pos += int(h.Length)
	}
}

// checkMarkersLocked refuses data if it holds a transaction marker from a
// coordinator older than one whose marker for the same producer is
// already here (TRANSACTION_COORDINATOR_FENCED). Applied entries are
// checked on every replica against the same state, so all refuse alike.
func (p *Partition) checkMarkersLocked(data []byte, hdrs []storage.BatchHeader) error {
	pos := 0
	for _, h := range hdrs {
		end := pos + int(h.Length)
		if h.IsControl() && h.ProducerID >= 0 && end <= len(data) {
			if _, ce, ok := storage.ParseControlMarker(data[pos:end]); ok && ce >= 0 {
				if e := p.mu.producers[h.ProducerID]; e != nil && ce < e.coordEpoch {
					return fmt.Errorf("%w: marker of producer %d from coordinator epoch %d, but epoch %d already wrote one", kerr.TransactionCoordinatorFenced, h.ProducerID, ce, e.coordEpoch)
				}
			}
		}
		pos = end
	}
	return nil
}

// observeBatchLocked updates the producer state with one batch at base;
// control is the whole batch if it is a control batch (nil otherwise, or
// if unknown).
func (p *Partition) observeBatchLocked(h storage.BatchHeader, base int64, control []byte) {
	if h.ProducerID < 0 {
		return
	}
	e := p.mu.producers[h.ProducerID]
	if e == nil || h.ProducerEpoch > e.epoch {
		// A newer epoch starts the sequences afresh; the coordinator
		// epoch carries over.
		ne := &producerEntry{epoch: h.ProducerEpoch}
		if e != nil {
			ne.coordEpoch = e.coordEpoch
		}
		e = ne
		p.mu.producers[h.ProducerID] = e
	}
	if h.IsControl() {
		// A transaction marker carries no sequence. Written with a newer
		// epoch (the coordinator fenced the producer), it made that
		// epoch current above, so the fenced producer's batches are
		// refused.
		if _, ce, ok := storage.ParseControlMarker(control); ok && ce > e.coordEpoch {
			e.coordEpoch = ce
		}
		return
	}
	first, last := batchSeqs(h)
	e.push(seqBatch{firstSeq: first, lastSeq: last, baseOffset: base})
}

func (p *Partition) rebuildProducers() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.ScanBatchesControl(p.log.StartOffset(), func(h storage.BatchHeader, control []byte) error {
		p.observeBatchLocked(h, h.BaseOffset, control)
		return nil
	})
}
