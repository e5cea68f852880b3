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
// implements group.Propose: the call only enqueues.
func (p *Partition) proposeInternal(batch []byte) func() error {
	if !p.isLeader() {
		return func() error {
			return fmt.Errorf("%w: this broker is no longer the raft leader of %s", kerr.NotCoordinator, p)
		}
	}
	f := p.grp.Raft.Apply(batch, replicaApplyTimeout)
	return func() error { return replicaResult(f).err }
}
