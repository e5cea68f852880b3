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
//
// Expiry (Kafka's producer.id.expiration.ms): a producer with no batch for
// Config.ProducerIDExpiration is forgotten, unless it has a transaction
// open here. "For" is measured on the partition's own clock, the highest
// batch timestamp (MaxTimestamp) appended so far, against the producer's
// newest batch timestamp, never on a replica's wall clock: every replica,
// and a replica rebuilding from its log, applies the same batches in the
// same order and so forgets the same producers at the same batch. A
// producer's clock running far behind the others' makes it look idle
// sooner; one far ahead ages the others (LogAppendTime topics use the
// leader's clock only). A forgotten producer's next batch is accepted at
// whatever sequence it carries, as from a new producer (as Kafka does once
// a producer's state is gone): the client sees its produce succeed. Only a
// retry of a batch sent before the expiry and retried after it would be
// written twice, which needs a retry delayed longer than the expiration.

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
	// lastTime is the highest batch timestamp (Unix ms) of the producer's
	// batches and markers here; expiry counts from it.
	lastTime int64
	// inTxn: a transactional batch came after the producer's last marker,
	// so its transaction is open here and the entry does not expire.
	// Kept in the entry rather than asked of the log's transaction index
	// so that a rebuild from the log decides exactly as the appends did.
	inTxn bool
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
	clock := p.mu.clock
	for i, h := range hdrs {
		now := clock
		clock = max(clock, h.MaxTimestamp)
		if h.ProducerID < 0 || h.IsControl() {
			// A transaction marker has no sequence; the coordinator
			// writes it through raft (observeBatchLocked adopts its epoch).
			continue
		}
		e, ok := sim[h.ProducerID]
		if ok && p.expired(&e, now) {
			e, ok = producerEntry{}, false
		}
		if !ok {
			if cur := p.liveProducerLocked(h.ProducerID, now); cur != nil {
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
			// Unknown producer (new, expired, or its state went with
			// retention): accept whatever sequence it starts at.
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
		e.lastTime = max(e.lastTime, h.MaxTimestamp)
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
				if e := p.liveProducerLocked(h.ProducerID, p.mu.clock); e != nil && ce < e.coordEpoch {
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
	now := p.mu.clock
	p.mu.clock = max(p.mu.clock, h.MaxTimestamp)
	defer p.sweepProducersLocked()
	if h.ProducerID < 0 {
		return
	}
	e := p.liveProducerLocked(h.ProducerID, now)
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
	e.lastTime = max(e.lastTime, h.MaxTimestamp)
	if h.IsControl() {
		e.inTxn = false
		// A transaction marker carries no sequence. Written with a newer
		// epoch (the coordinator fenced the producer), it made that
		// epoch current above, so the fenced producer's batches are
		// refused.
		if _, ce, ok := storage.ParseControlMarker(control); ok && ce > e.coordEpoch {
			e.coordEpoch = ce
		}
		return
	}
	if h.IsTransactional() {
		e.inTxn = true
	}
	first, last := batchSeqs(h)
	e.push(seqBatch{firstSeq: first, lastSeq: last, baseOffset: base})
}

// expired reports whether producer state e is forgotten when the
// partition's clock reads now.
func (p *Partition) expired(e *producerEntry, now int64) bool {
	exp := p.cfg.ProducerIDExpiration.Milliseconds()
	return exp > 0 && !e.inTxn && now-e.lastTime > exp
}

// liveProducerLocked is producer pid's state unless it expired by now
// (a sweep has not removed it yet): nil if there is none.
func (p *Partition) liveProducerLocked(pid int64, now int64) *producerEntry {
	e := p.mu.producers[pid]
	if e == nil || p.expired(e, now) {
		return nil
	}
	return e
}

// sweepProducersLocked removes the expired producers once the clock has
// moved an eighth of the expiration since the last sweep, so an append
// scans the producers rarely. Whether a producer is expired never depends
// on a sweep (liveProducerLocked checks), only the memory it holds does.
func (p *Partition) sweepProducersLocked() {
	exp := p.cfg.ProducerIDExpiration.Milliseconds()
	if exp <= 0 || p.mu.clock < p.mu.nextSweep {
		return
	}
	p.mu.nextSweep = p.mu.clock + max(exp/8, 1)
	n := 0
	for pid, e := range p.mu.producers {
		if p.expired(e, p.mu.clock) {
			delete(p.mu.producers, pid)
			n++
		}
	}
	if n > 0 {
		p.expiredProducers.Add(uint64(n))
		if p.cfg.ProducersExpired != nil {
			p.cfg.ProducersExpired(n)
		}
	}
}

// Producers is the number of producers whose state the partition holds
// (expired ones included until a sweep removes them) and the number it
// removed as expired since it was opened.
func (p *Partition) Producers() (tracked int, expired uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.producers), p.expiredProducers.Load()
}

func (p *Partition) rebuildProducers() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rebuildProducersLocked()
}

// rebuildProducersLocked rebuilds the producer state from the whole log.
func (p *Partition) rebuildProducersLocked() error {
	p.resetProducersLocked()
	return p.log.ScanBatchesControl(p.log.StartOffset(), func(h storage.BatchHeader, control []byte) error {
		p.observeBatchLocked(h, h.BaseOffset, control)
		return nil
	})
}

// resetProducersLocked forgets every producer and the partition's clock,
// before a rebuild from the log.
func (p *Partition) resetProducersLocked() {
	p.mu.producers = map[int64]*producerEntry{}
	p.mu.clock, p.mu.nextSweep = 0, 0
}
