package broker

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// proposeInternal replicates a record batch the broker writes itself (the
// group coordinator's records in a partition of __consumer_offsets)
// through the partition's raft group, like a produced batch but without
// the client-facing checks. The returned function waits until the entry
// is committed on a majority and appended to the local log by the replica
// state machine (replicaFSM.Apply), and returns why not otherwise. It
// implements group.Propose: the call only enqueues. term is the raft term
// the caller loaded its state in: a proposal in a later term is refused,
// since another leader may have written in between.
func (p *Partition) proposeInternal(term uint64, batch []byte) func() error {
	if !p.isLeader() || p.grp.Raft.CurrentTerm() != term {
		return func() error {
			return fmt.Errorf("%w: this broker is no longer the raft leader of %s in term %d", kerr.NotCoordinator, p, term)
		}
	}
	f := p.grp.Raft.Apply(batch, replicaApplyTimeout)
	return func() error { return replicaResult(f).err }
}
