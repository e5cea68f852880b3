// Package gossip shows policy rollout status across the agents of a run.
//
// The agents of one run form a pool with github.com/hashicorp/memberlist.
// Each node advertises which version of each policy it holds and since
// when; any member can compute the pool-wide View of a policy (nodes per
// version, the newest version, how far behind each node is) that
// `simtel learner status` prints and the agent exports as metrics.
//
// # Using a Pool
//
//  1. Fill a Config: NodeName (unique in the pool, the agent's host tag),
//     Bind, the seeds in Join (the same list on every node is fine, this
//     node included), and Cluster = the run id. Start returns once the
//     listeners are up; joining continues in the background, with backoff,
//     until another node is reachable, so agents may start in any order.
//  2. Call SetHolding(policy, Holding{Version, Since}) whenever a verified
//     version lands in the local cache (and once per cached policy after a
//     restart). Version 0 withdraws a policy. SetHolding does not block on
//     the network.
//  3. Call View(policy) for the status, Members for the pool size.
//  4. Call Close on shutdown: the node leaves (peers drop it from their
//     counts at once) and all goroutines have exited when Close returns.
//
// Pools of different runs never merge, even with the same seeds: Cluster
// becomes memberlist's Label, which prefixes every packet and stream, and
// a node drops traffic with another label. This guards against mistakes;
// it is not authentication.
//
// # What is gossiped, and how
//
// Policy names are not sent. A holding travels as (FNV-1a 64 of the name,
// version, since in unix milliseconds), about 16 bytes whatever the name's
// length; View hashes the name it is asked about. A node's holdings carry
// a stamp (boot = its start time in ns, seq = count of changes) that
// orders them, a restart winning over any state of the former life.
//
//   - Node meta (memberlist's per-node metadata, at most 512 bytes): the
//     stamp and all holdings when they fit, which is up to about 30
//     policies; 10 policies with long names take about 185 bytes. SetHolding
//     re-encodes it and calls memberlist's UpdateNode, which gossips an
//     alive message with the new meta; memberlist's push/pull (every 30s,
//     scaled up in large pools) repairs any node that missed it. Liveness,
//     restarts and departures all come with memberlist's membership.
//   - The meta also carries the node's policy relay address (Config.Relay)
//     as an optional field after the holdings; View shows it per node, so
//     a node fetching a version finds the peers that hold it and where to
//     ask them. Nodes built before the field ignore it.
//   - Record: the same holdings with the node's name, as a user message.
//     When the holdings do not fit the meta (more than about 30 policies)
//     the meta carries only the stamp and the record is broadcast through
//     a memberlist.TransmitLimitedQueue; receivers store a record newer than
//     the one they hold and queue it again (epidemic spread); push/pull
//     carries it too (Delegate.LocalState/MergeRemoteState send the records
//     that the metas do not cover). A record over about 1.3 KB (about 80
//     policies) does not fit a UDP packet and spreads by push/pull only.
//   - Direct send: in pools of up to 16 nodes (directMax) every change is
//     also sent to every member directly. memberlist's broadcasts go to
//     only 4 gossip targets per forwarder in pools under 10 nodes, which
//     leaves a measurable chance that a member misses an update until the
//     next push/pull; in large pools the number of forwarders makes that
//     negligible.
//
// View takes, for each member, the holdings of its record when that is
// newer than its meta, else those of its meta.
//
// Cost in a large pool: a change is one alive message of about 60 bytes
// plus the meta, forwarded RetransmitMult*ceil(log10(n+1)) times by every
// node that hears it first (16 times at n = 1000). When a whole pool of n
// nodes takes a new version, each node forwards n such messages, within
// memberlist's gossip budget of 3 UDP packets of 1400 bytes every 200ms:
// with 2 policies (about 110-byte messages) the status of 100 nodes
// settles within seconds, that of 1000 nodes within a minute or two.
// memberlist serves the newest messages first, and push/pull bounds the
// lag for any node that missed one.
//
// Known memberlist v0.7.0 issues handled here: its TransmitLimitedQueue can
// silently drop a broadcast (hashicorp/memberlist#263), which the record
// queue avoids with a never-sent anchor entry (memberlist's own queue is
// not reachable; push/pull and, in small pools, direct sends cover it);
// the *Node values it hands out are updated in place, so the Pool keeps
// its own copy of the member table, taken in the event callbacks; and
// NotifyLeave does not say whether a node left or failed, so both stay in
// views with Alive false for a while (View explains what is counted).
//
// # Goroutines and locks
//
// Start runs two goroutines besides memberlist's own: the advertise loop
// (calls UpdateNode and sends directly after each change, drops departed
// members and stale records periodically) and, when there are seeds, the
// join loop (ends once this node has a peer). Close cancels both and waits.
//
// Lock order: memberlist's node lock, then Pool.mu, then the record queue's
// lock. memberlist calls the delegate, which takes Pool.mu, while holding
// its node lock, so Pool.mu is never held while calling into memberlist.
// The record queue learns the pool size from an atomic counter, not under
// Pool.mu, because it asks while holding its own lock.
package gossip
