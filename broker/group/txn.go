package group

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Transactional offset commits. The broker's transaction coordinator
// keeps the offsets of TxnOffsetCommit with the transaction and hands
// them over here only when the transaction commits; until then
// Config.PendingTxnOffset makes them visible to OffsetFetch's
// RequireStable check.

// ValidateTxnOffsetCommit checks the group generation and member of a
// TxnOffsetCommit v3+ (KIP-447) like an OffsetCommit's: a member fenced by
// a rebalance gets ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID and aborts its
// transaction. A generation below 0 with no member skips the check.
func (c *Coordinator) ValidateTxnOffsetCommit(name string, generation int32, memberID string, inst *string) *kerr.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.closed {
		return kerr.CoordinatorNotAvailable
	}
	if generation < 0 && memberID == "" && inst == nil {
		return nil
	}
	g := c.mu.groups[name]
	if g == nil {
		return kerr.IllegalGeneration
	}
	return c.validateCommitLocked(g, generation, memberID, inst)
}

// CommitTxnOffsets stores offsets of a committed transaction for the
// group, whatever its state: the transaction was validated when the
// offsets were sent, and its commit is already decided. A group that does
// not exist is created empty, as a simple commit would.
func (c *Coordinator) CommitTxnOffsets(name string, offs []CommittedOffset) error {
	if len(offs) == 0 {
		return nil
	}
	tps := make([]TopicPartition, len(offs))
	for i, o := range offs {
		tps[i] = TopicPartition{o.Topic, o.Partition}
	}
	c.mu.Lock()
	var g *group
	for {
		if c.mu.closed {
			c.mu.Unlock()
			return errCoordinatorClosed
		}
		g = c.mu.groups[name]
		if g == nil {
			g = newGroup(strings.Clone(name))
			c.mu.groups[g.name] = g
		}
		if g.state == stateDead {
			c.mu.Unlock()
			return fmt.Errorf("group %q is being deleted", name)
		}
		if !g.persistConflictLocked(tps, false) {
			break
		}
		if !c.waitPersistLocked(g) {
			c.mu.Unlock()
			return errCoordinatorClosed
		}
	}
	err := c.commitOffsetsLocked(g, tps, offs)
	if err != nil {
		return fmt.Errorf("cannot store offsets of group %q: %w", name, err)
	}
	return nil
}

// unstable reports whether a transaction holds a pending offset for the
// group partition. Must be called without c.mu.
func (c *Coordinator) unstable(name, topic string, partition int32) bool {
	return c.pendingTxn != nil && c.pendingTxn(name, topic, partition)
}
