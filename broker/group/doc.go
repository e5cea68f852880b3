// Package group is simtel's classic Kafka consumer group coordinator
// (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, offsets and group admin).
// One Coordinator serves the groups of one partition of __consumer_offsets:
// a single-node broker runs one, a cluster broker one per offsets partition
// it leads (it answers for the others with ErrorResponse). The broker
// decodes a request, calls the matching Coordinator method and encodes the
// response it returns; responses carry the request's version. Persistence
// goes through the Store interface: LogStore keeps the state, as Kafka
// does, as records of a partition of the compacted internal topic
// __consumer_offsets, appended and fsynced by the store itself
// (OpenLogStore) or proposed through the partition's raft group and
// appended by its state machine on every replica (OpenReplicatedLogStore);
// MemStore is an in-memory one.
//
// # State machine
//
// Each group is in one of Kafka's states:
//
//	Empty ──join──▶ PreparingRebalance ──all joined / deadline──▶ CompletingRebalance
//	  ▲                 ▲      │                                      │  leader SyncGroup
//	  │                 │      └──no member left──▶ Empty              ▼
//	  │                 └──join, leave, expiry, protocol change──── Stable
//	  └──────────── DeleteGroups (Empty only) ──▶ Dead (removed once the store confirmed)
//
// In detail:
//
//   - Empty: no members. Holds offsets (a group used only for manual
//     commits never leaves Empty). The first join starts a rebalance; with
//     InitialRebalanceDelay the join phase then waits that long (extended
//     while new members keep arriving, bounded by the rebalance timeout)
//     so that members starting together form one generation.
//   - PreparingRebalance: every member must (re)join. JoinGroup calls block
//     until all members have joined and no member holding a fresh
//     MEMBER_ID_REQUIRED id is outstanding, or until the rebalance timeout
//     (the members' maximum) passes. Stable members learn of the rebalance
//     from Heartbeat (REBALANCE_IN_PROGRESS). At completion dynamic members
//     that did not rejoin are removed, static ones are kept (their instance
//     may be restarting), the generation is incremented, a protocol is
//     voted, the leader (the previous one if it rejoined, else the earliest
//     joined) gets every member's metadata, and the group moves on.
//   - CompletingRebalance: the leader computes the assignment. Followers'
//     SyncGroup calls block until the leader's SyncGroup delivers it, which
//     makes the group Stable. A member leaving or a join with new
//     protocols restarts the rebalance; blocked SyncGroups then get
//     REBALANCE_IN_PROGRESS.
//   - Stable: members heartbeat. A new member, a leaving or expired one, a
//     member with new protocols or the leader rejoining start a rebalance.
//     A static member restarting (known instance id, empty member id) gets
//     a new member id and its old assignment without a rebalance if the
//     group's selected protocol would not change; its old member id is
//     fenced (FENCED_INSTANCE_ID).
//   - Dead: the group is being deleted; requests get retriable errors.
//
// # Timeouts
//
// One janitor goroutine ticks (100ms) and, under the coordinator lock,
// enforces every deadline: a member that has sent nothing (join, sync,
// heartbeat, commit) within its session timeout is removed, except while
// it is blocked in JoinGroup or SyncGroup (those waits are bounded by the
// rebalance and pending-sync deadlines instead); MEMBER_ID_REQUIRED ids
// expire after the session timeout; the join phase completes at its
// deadline; members that received a JoinGroup response but have not sent
// SyncGroup within the rebalance timeout are removed.
//
// # Goroutines
//
// Besides the callers' goroutines (the broker calls JoinGroup and SyncGroup
// from goroutines that may block), the coordinator owns two, both started
// by New and stopped by Close:
//
//   - the janitor, described above;
//   - the persister, which writes group metadata snapshots through
//     Store.SaveGroup, outside the lock, and does a last pass on Close.
//     Snapshots are taken under the lock when a group reaches a consistent
//     point (Stable with the leader's assignment, Empty, a static member
//     replaced while Stable), so a restart restores a generation that
//     really existed, never a half-done rebalance.
//
// LogStore owns none: its calls run on the callers' goroutines, and the
// fsyncs they wait for are done by the partition log's flusher, which the
// broker owns (LogStore.Close, called by Coordinator.Close, leaves the log
// open).
//
// Blocked JoinGroup/SyncGroup calls wait on a per-call channel closed under
// the lock once the response is filled in. A caller that stops waiting
// (ctx cancelled, coordinator closing) takes the lock and detaches its
// waiter if it is still attached; as attaching, filling and detaching all
// happen under the lock, exactly one of "response delivered" and "call
// abandoned" wins.
//
// # Ordering store writes
//
// Store calls block (Commit waits for an fsync), so they are never made
// under the lock. The coordinator keeps what the store holds and what it
// serves identical, even across concurrent requests, as follows:
//
//   - A write of offsets (OffsetCommit, OffsetDelete, DeleteTopicOffsets)
//     marks its partitions in flight in the group under the lock, calls the
//     store without it, then applies the change in memory and clears the
//     marks under the lock. A write touching a partition already in flight
//     waits for it first. Writes of one partition therefore reach the store
//     and memory in the same order, while writes of different partitions
//     and groups run concurrently and share the log's fsyncs.
//   - DeleteGroups waits until nothing of the group is in flight, marks the
//     group Dead and wholly in flight, deletes it from the store and only
//     then from memory. Nothing can write to the group meanwhile, and a
//     request recreating the group can only do so after the store deleted
//     it.
//   - SaveGroup and DeleteGroup calls are ordered by storeMu, held across
//     the call and across the snapshot or check that precedes it, so a
//     metadata save can never land after the group's deletion.
//
// # Locks
//
// Lock order: Coordinator.storeMu, then Coordinator.mu. mu guards all group
// and member state and is never held during a store call or a call to the
// TopicPartitions/EndOffset callbacks; functions that need it end in
// Locked. storeMu is held only by the persister and DeleteGroups around
// their store calls. LogStore.mu guards only its index of live keys; it
// is held while a call's batch is appended to the log (whose own locks
// come after it) but never across Log.Sync.
package group
