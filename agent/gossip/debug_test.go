package gossip

import "testing"

func dumpPool(t *testing.T, p *Pool) {
	for _, n := range p.ml.Members() {
		t.Logf("%s: ml member %s state %v meta %d", p.cfg.NodeName, n.Name, n.State, len(n.Meta))
	}
	p.mu.Lock()
	for name, m := range p.mu.members {
		t.Logf("%s: table %s %+v", p.cfg.NodeName, name, *m)
	}
	p.mu.Unlock()
}
