package txn

// The transaction coordinator's state record, as stored in the internal
// topic __transaction_state.
//
// One record per state change: key = the transactional id, value = the
// whole state of that id after the change, JSON with a format version
// (this is simtel's own format; Kafka's binary schema would buy nothing
// since no other program reads this topic). The topic is compacted, so it
// keeps the newest state of each id; loading replays it in order and the
// last record of each key wins.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// txnStatus is a transaction's place in its life cycle:
//
//	Empty ─AddPartitions/AddOffsets─► Ongoing ─EndTxn(commit)─► PrepareCommit ─markers─► CompleteCommit
//	                                     │                                                    │
//	                                     └─EndTxn(abort), timeout, InitProducerID─► PrepareAbort ─markers─► CompleteAbort
//
// and from Complete* the next AddPartitions starts a new Ongoing
// transaction. Prepare* is written before the markers, so a crash between
// the two is finished at load; Complete* after them.
type txnStatus uint8

const (
	txnEmpty txnStatus = iota
	txnOngoing
	txnPrepareCommit
	txnPrepareAbort
	txnCompleteCommit
	txnCompleteAbort
)

// String is the state name Kafka's DescribeTransactions and
// ListTransactions use.
func (s txnStatus) String() string {
	switch s {
	case txnEmpty:
		return "Empty"
	case txnOngoing:
		return "Ongoing"
	case txnPrepareCommit:
		return "PrepareCommit"
	case txnPrepareAbort:
		return "PrepareAbort"
	case txnCompleteCommit:
		return "CompleteCommit"
	case txnCompleteAbort:
		return "CompleteAbort"
	}
	return "Unknown"
}

// txnTP is a topic partition in a transaction.
type txnTP struct {
	Topic     string `json:"t"`
	Partition int32  `json:"p"`
}

// txnOffset is an offset committed inside a transaction (TxnOffsetCommit),
// applied to its group only when the transaction commits.
type txnOffset struct {
	Group       string `json:"g"`
	Topic       string `json:"t"`
	Partition   int32  `json:"p"`
	Offset      int64  `json:"o"`
	LeaderEpoch int32  `json:"e"`
	Metadata    string `json:"m,omitempty"`
}

// txnMeta is the whole state of one transactional id.
type txnMeta struct {
	Version    int   `json:"v"`
	ProducerID int64 `json:"pid"`
	Epoch      int16 `json:"epoch"`
	// PrevEpoch is the epoch before the coordinator bumped it to abort a
	// timed-out transaction (-1 otherwise): that producer may still end
	// its transaction with an abort and re-initialize with it (KIP-360).
	PrevEpoch  int16       `json:"prev_epoch"`
	TimeoutMs  int32       `json:"timeout_ms"`
	Status     txnStatus   `json:"status"`
	Partitions []txnTP     `json:"partitions,omitempty"`
	Groups     []string    `json:"groups,omitempty"`
	Offsets    []txnOffset `json:"offsets,omitempty"`
	// StartMs is when the current transaction began (first partition or
	// group added); UpdateMs the last change.
	StartMs  int64 `json:"start_ms"`
	UpdateMs int64 `json:"update_ms"`
}

const txnMetaVersion = 1

func (m *txnMeta) clone() txnMeta {
	c := *m
	c.Partitions = slices.Clone(m.Partitions)
	c.Groups = slices.Clone(m.Groups)
	c.Offsets = slices.Clone(m.Offsets)
	return c
}

func (m *txnMeta) hasPartition(tp txnTP) bool { return slices.Contains(m.Partitions, tp) }

func (m *txnMeta) hasGroup(g string) bool { return slices.Contains(m.Groups, g) }

// setOffset records or replaces the pending offset of a group partition.
func (m *txnMeta) setOffset(o txnOffset) {
	for i := range m.Offsets {
		if m.Offsets[i].Group == o.Group && m.Offsets[i].Topic == o.Topic && m.Offsets[i].Partition == o.Partition {
			m.Offsets[i] = o
			return
		}
	}
	m.Offsets = append(m.Offsets, o)
}

func encodeTxnMeta(m *txnMeta) []byte {
	m.Version = txnMetaVersion
	b, err := json.Marshal(m)
	if err != nil {
		// Only plain fields: cannot fail.
		panic(fmt.Sprintf("cannot encode transaction state: %v", err))
	}
	return b
}

var errBadTxnRecord = errors.New("malformed transaction state record")

// decodeTxnMeta decodes and validates a state value.
func decodeTxnMeta(b []byte) (txnMeta, error) {
	var m txnMeta
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", errBadTxnRecord, err)
	}
	switch {
	case m.Version != txnMetaVersion:
		return m, fmt.Errorf("%w: format version %d, want %d", errBadTxnRecord, m.Version, txnMetaVersion)
	case m.ProducerID < 0 || m.Epoch < 0:
		return m, fmt.Errorf("%w: producer id %d epoch %d", errBadTxnRecord, m.ProducerID, m.Epoch)
	case m.Status > txnCompleteAbort:
		return m, fmt.Errorf("%w: state %d", errBadTxnRecord, m.Status)
	case m.TimeoutMs <= 0:
		return m, fmt.Errorf("%w: timeout %d ms", errBadTxnRecord, m.TimeoutMs)
	}
	return m, nil
}
