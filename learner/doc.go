// Package learner fans policy versions (model weights, tens to hundreds of
// MB) out from learners to every node: publishers write versions to a
// topic, one Subscriber per node per policy keeps the newest verified
// version in a local cache that the node's workers read.
//
// # Format
//
// Policy <name> lives on topic policy.<name>, one partition. A version is
// a run of chunk records followed by one manifest record:
//
//	offset  headers                                         value
//	 40     simtel.kind=chunk    simtel.version=7 index=0    ≤ 1 MiB of the blob
//	 41     simtel.kind=chunk    simtel.version=7 index=1    ≤ 1 MiB
//	 ...
//	 103    simtel.kind=manifest simtel.version=7            Manifest JSON
//
// Every record of one Publish also carries simtel.publish=<random id>,
// copied into the manifest's publish_id, so chunks of two publishers that
// raced for one version number are never mixed. The manifest gives size,
// chunk count, SHA-256 of the whole blob, user metadata and the offset
// range [first_chunk_offset, last_chunk_offset] holding the chunks;
// records of other versions inside that range (a concurrent publisher)
// are skipped by header. Readers act on manifests only: chunks without a
// manifest (a publisher that died) are garbage that nobody reads twice.
// Versions are 1, 2, ...; a publisher picks the newest complete version +
// 1. Record keys are unused.
//
// The topic is created on first publish with cleanup.policy=delete,
// max.message.bytes=2 MiB, segment.bytes=8 MiB, retention.ms=-1 (the
// newest version must outlive a learner that pauses) and retention.bytes
// sized to keep about three versions; Publish raises retention.bytes
// before a bigger version can be cut by it.
//
// # Reading
//
// Latest finds the newest complete version without scanning: it reads the
// last record; a manifest is the answer, a chunk of index i at offset o
// means the search continues at o-i-1, before that version's first chunk.
// Fetch reads one version's offset range with a dedicated consume session
// and verifies count, size and hash; a mismatch is ErrCorrupt.
//
// # Subscriber
//
// A Subscriber is built for the node agent. Its obligations, in order:
//
//  1. NewSubscriber opens Dir/<policy>/, removes leftovers of interrupted
//     writes, re-hashes the newest cached version (falling back to older
//     ones if it no longer matches) and serves it at once.
//  2. Run (one goroutine, the caller's) jumps to Latest, fetching it by
//     range if it is newer than the cached one, then consumes the topic
//     from that manifest's offset + 1.
//  3. A new version's chunks are written to a temporary file and hashed as
//     they stream by, so each byte crosses the network once per node.
//     When its manifest arrives the version is verified, fsynced, renamed
//     to <version>, <version>.json is written and the latest symlink is
//     swapped by renaming a fresh link over it. Versions beyond Keep are
//     deleted (a worker holding an old file open keeps reading it).
//  4. A version whose chunks were not all seen in order (Run started in
//     the middle of them, or another publisher interleaved) is fetched by
//     range when its manifest arrives.
//  5. At a version's first chunk, and again at its manifest, Run compares
//     the partition's high watermark with the record count of the last
//     version: if enough records follow to hold another complete version,
//     it asks Latest, and if a newer complete version exists it jumps
//     there (Stats.Skipped counts the versions never held).
//  6. A corrupt version (hash, size or chunk mismatch, invalid manifest) is
//     logged, counted in Stats.Corrupt and never installed; the previous
//     version stays latest and later versions are tried as usual. A node
//     that holds nothing falls back to the newest good version before it.
//  7. Current and Wait (safe from any goroutine) serve the held version;
//     Wait is the long poll behind GET /v1/policy/<name>?after=v&wait=30s.
//
// Run starts no goroutines of its own beyond the kgo clients it creates
// and closes (one to list offsets and fetch, one consume session while
// following, one per range fetch or Latest read).
//
// # Cache layout
//
//	Dir/<policy>/7          blob of version 7 (0644)
//	Dir/<policy>/7.json     its manifest
//	Dir/<policy>/8, 8.json
//	Dir/<policy>/latest  -> 8
//	Dir/<policy>/.tmp-9-*   version 9 being written; never linked
//
// Temporary names are unique, so two agents on one node (two jobs) may
// share a directory: each installs the same verified bytes by rename. A
// temporary file older than ten minutes is a crash's leftover and is
// removed by the next NewSubscriber.
//
// Workers either open Dir/<policy>/latest (zero network) or ask the agent.
//
// # Locks
//
// Subscriber.mu guards the held version, its path, the stats and the
// channel Wait sleeps on; nothing else is done under it. Run's own state
// (the assembly in progress, versions known to be corrupt) belongs to the
// goroutine in Run. Publisher.mu guards the per-policy mutexes that make
// one Publisher's Publish calls for a policy take turns; it is never held
// while one of those is.
package learner
