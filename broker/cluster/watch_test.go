package cluster

import (
	"testing"
	"time"
)

// Refused waits for a watcher that is finding out why its connection to
// the broker ended, and answers what it found.
func TestRefusedWaitsForWatcher(t *testing.T) {
	defer func(d time.Duration) { findOutWait = d }(findOutWait)
	findOutWait = time.Hour // no bound but the watcher's answer
	n := &Node{fsm: NewFSM()}
	n.cfg.NodeID = 1
	n.down.ids = map[int32]bool{}
	n.down.up = make(chan struct{})

	// Broker 2 is not in the metadata: a Refused that did not wait for
	// the watcher would answer false.
	done := n.findingOut(2)
	go func() {
		time.Sleep(10 * time.Millisecond)
		n.down.Lock()
		n.down.ids[2] = true
		n.down.Unlock()
		done()
	}()
	if !n.Refused(2) {
		t.Fatal("Refused answered before the watcher found broker 2 gone")
	}
	if n.beingFoundOut(2) {
		t.Fatal("broker 2 still being found out after its watcher is done")
	}

	// A watcher that found the broker alive: not refused.
	done = n.findingOut(3)
	go func() {
		time.Sleep(10 * time.Millisecond)
		done()
	}()
	if n.Refused(3) {
		t.Fatal("Refused reported broker 3 gone; its watcher found it alive")
	}
}
