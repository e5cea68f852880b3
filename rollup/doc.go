// Package rollup is simtel's rollup worker: a consumer-group member that
// reads the telemetry topic and produces, per series and window, one
// line-protocol record of aggregates to the compacted topics rollup_10s,
// rollup_1m and rollup_1h, exactly once. docs/rollups.md is the user's
// manual.
//
// # Data path
//
// One loop goroutine (Run → loop) owns everything:
//
//	PollRecords → add, per record:
//	   lineproto.SeriesEnd → series of the partition (new: Decode, the
//	   --max-series cap) or DecodeFields → sample time → late? (its 10 s
//	   window ended at or before the partition's closed watermark: count,
//	   drop) → the 10 s window's field aggregates (count, min, max, sum,
//	   last, a DDSketch; NaN and ±Inf only counted) → watermark (latest
//	   sample time − AllowedLateness) past the partition's earliest open
//	   window end? → closeThrough:
//	      each 10 s window ending by the watermark is emitted and merged
//	      into its 1 min window, then each such 1 min window into its
//	      1 h window, then the 1 h windows are emitted
//	→ every CommitInterval: checkpoint + End (commit)
//
// Event time is kept per input partition (partition); a series lives in
// one partition because the agent keys records by run and host.
//
// # Exactly once
//
// franz-go's GroupTransactSession commits, in one transaction:
//
//  1. the output records of the windows emitted since the last commit;
//  2. the checkpoint: a state record per open window changed since the
//     last commit (a whole one, or a delta of what it gained), a tombstone
//     per record of each emitted window, and each partition's event time
//     (state.go), to the state partition of its input partition;
//  3. the offsets of every polled record.
//
// A partition's state is loaded (load) when it is assigned, after an
// aborted transaction (reset: the session rewinds to the committed
// offsets, so every partition is read back) and at start: the state
// partition is read up to its last stable offset, which, with the
// worker's transactional id fenced and committed, matches the group's
// committed offset. Records are processed only for loaded partitions.
//
// # Run summaries
//
// Besides its windows, each partition keeps a runAgg per run with samples
// in it (summary.go): per metric (measurement.field) the same field
// aggregates as a window, over every sample of the run, late ones too:
// a closing 10 s window is merged into it, and the samples no window will
// merge go to it one by one (summarize.go). They are checkpointed with
// the windows. Once the run registry (the runs
// topic, followed by runsFollower) says the run ended, end produces each
// such aggregate as a partial to PartialTopic, partitioned by run, and
// forgets it, in the transaction. The group also consumes PartialTopic:
// the worker owning a run's partition merges the run's partials (merged;
// merger.go: at most MaxSummaryRuns runs held, a run not held reads its
// earlier partials back first, rebuild) and, in the same transaction as
// those offsets, produces the summary to SummaryTopic, one line per
// metric. Later samples make new
// partials, so the summary is produced again, amended. Stage 1 is exactly
// once like the windows; stage 2 too, since a partial's merge and the
// summary it changes commit with its offset.
//
// # Goroutines and locks
//
// The loop goroutine touches all state but worker.mu's fields, which
// kgo's group callbacks (onAssigned, onRevoked) set; the loop reads them
// between polls (dropRevoked, loadAssigned). The run registry's follower
// (runsFollower.follow) runs on its own goroutine, which Run starts and
// waits for; the loop reads what it learnt through its mutex. With BlockRebalanceOnPoll a
// rebalance waits until the loop calls AllowRebalance after a commit, so
// partitions never move in the middle of a transaction's processing. The
// metrics server (HTTPListen) runs on its own goroutine, which Run waits
// for.
package rollup
