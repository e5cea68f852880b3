package gossip

import (
	"net"
	"slices"
	"strings"
	"time"
)

// View is the pool-wide rollout status of one policy as this node sees it.
//
// Staleness is measured against the newest version any live member holds:
//
//   - Newest is the highest Version among the live members (0 if none
//     holds the policy).
//   - A node holding Version v < Newest (v = 0: nothing) is
//     StaleVersions = Newest - v versions behind, and StaleSeconds = now -
//     T seconds behind, where T is the earliest Since among the live
//     members holding Newest: how long the newest version has been
//     available in the pool without this node having it. now is this
//     node's clock and T another node's, so clock skew between nodes adds
//     to StaleSeconds; it is never negative.
//   - An up-to-date node has StaleVersions 0 and StaleSeconds 0.
//
// A member that went away (left by closing its Pool, or declared dead by
// memberlist after failed probes) stays in Nodes with Alive false and its
// last holding for memberlist's GossipToTheDeadTime (30s; 15s with Fast),
// so a node lost mid-rollout shows in the status, but it is not counted in
// Newest, ByVersion or the staleness fields, which cover live members only.
// memberlist's "suspect" state is not visible here: a suspect counts as
// alive until it is declared dead.
type View struct {
	Policy string `json:"policy"`
	Newest int64  `json:"newest"`
	// Nodes has one entry per member, sorted by name.
	Nodes []NodeHolding `json:"nodes"`
	// ByVersion counts the members per version (0 = holding nothing).
	ByVersion        map[int64]int `json:"by_version"`
	MaxStaleVersions int64         `json:"max_stale_versions"`
	MaxStaleSeconds  float64       `json:"max_stale_seconds"`
}

// NodeHolding is one member's holding of the viewed policy.
type NodeHolding struct {
	Node          string    `json:"node"`
	Addr          string    `json:"addr"`
	Version       int64     `json:"version"`
	Since         time.Time `json:"since"` // zero when Version is 0
	StaleVersions int64     `json:"stale_versions"`
	StaleSeconds  float64   `json:"stale_seconds"`
	Alive         bool      `json:"alive"` // false: went away; listed for a while, not counted
	// Relay is the address of the node's policy relay ("" when it has
	// none or runs a version without relays).
	Relay string `json:"relay,omitempty"`
}

// View returns the rollout status of policy across the pool. A member
// with more policies than fit its meta whose record has not reached this
// node yet shows Version 0 until it does.
func (p *Pool) View(policy string) View {
	key := policyKey(policy)
	p.mu.Lock()
	nodes := make([]NodeHolding, 0, len(p.mu.members))
	for name, m := range p.mu.members {
		nh := NodeHolding{Node: name, Addr: m.addr, Alive: m.alive}
		if name == p.cfg.NodeName {
			h := p.mu.holdings[policy]
			nh.Version, nh.Since, nh.Relay = h.Version, h.Since, relayAddr(p.cfg.Relay, p.addr)
		} else {
			es, relay := p.entriesLocked(name, m.meta)
			if e, ok := find(es, key); ok {
				nh.Version, nh.Since = e.version, fromMillis(e.sinceMs)
			}
			nh.Relay = relayAddr(relay, m.addr)
		}
		nodes = append(nodes, nh)
	}
	p.mu.Unlock()
	return summarize(policy, time.Now(), nodes)
}

// entriesLocked returns the holdings a member advertises: those of its
// record when the record is newer than its meta (the broadcast outran
// memberlist's), else those of its meta, or, when the meta holds only the
// stamp, those of the record of the same boot even if it lags. relay is
// the relay address of the meta.
func (p *Pool) entriesLocked(name string, metaBytes []byte) (_ []entry, relay string) {
	m, err := decodeMeta(metaBytes)
	if err != nil {
		return nil, ""
	}
	r, ok := p.mu.records[name]
	switch {
	case ok && r.rec.stamp.newer(m.stamp):
		return r.rec.entries, m.relay
	case !m.external:
		return m.entries, m.relay
	case ok && r.rec.stamp.boot == m.stamp.boot:
		return r.rec.entries, m.relay
	}
	return nil, m.relay
}

// relayAddr completes a relay address advertised without a host
// (":port", a relay listening on all interfaces) with the host of the
// node's gossip address.
func relayAddr(relay, gossipAddr string) string {
	if !strings.HasPrefix(relay, ":") {
		return relay
	}
	host, _, err := net.SplitHostPort(gossipAddr)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, relay[1:])
}

// summarize fills in the staleness and totals of a view; nodes carry Node,
// Addr, Version, Since and Alive. Nodes that are not alive are listed but
// not counted.
func summarize(policy string, now time.Time, nodes []NodeHolding) View {
	v := View{Policy: policy, Nodes: nodes, ByVersion: make(map[int64]int)}
	var first time.Time // earliest Since of Newest
	for _, n := range nodes {
		switch {
		case !n.Alive:
		case n.Version > v.Newest:
			v.Newest, first = n.Version, n.Since
		case n.Version == v.Newest && !n.Since.IsZero() && (first.IsZero() || n.Since.Before(first)):
			first = n.Since
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if !n.Alive {
			continue
		}
		v.ByVersion[n.Version]++
		if n.Version >= v.Newest {
			continue
		}
		n.StaleVersions = v.Newest - n.Version
		if !first.IsZero() {
			n.StaleSeconds = max(now.Sub(first).Seconds(), 0)
		}
		v.MaxStaleVersions = max(v.MaxStaleVersions, n.StaleVersions)
		v.MaxStaleSeconds = max(v.MaxStaleSeconds, n.StaleSeconds)
	}
	slices.SortFunc(nodes, func(a, b NodeHolding) int { return strings.Compare(a.Node, b.Node) })
	return v
}
