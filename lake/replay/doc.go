// Package replay streams a run's telemetry back in its original order —
// by sample time, then partition, then offset — from the lake and, for the
// part the sink has not flushed yet, from the broker, with no gap and no
// duplicate at the seam; and it backfills lake data into a topic.
//
// # Data path
//
//  1. Open takes one catalog snapshot. For every partition p of the
//     telemetry topic, Last(p) is the last offset of the committed flushes
//     in that snapshot; the lake holds every offset up to it.
//  2. The run's telemetry objects (pruned by run, measurement and time in
//     the catalog) are fetched through the cache and opened in a DuckDB
//     engine; one ordered query per measurement reads them
//     (ORDER BY _time_ns, _partition, _offset). Tags are told from string
//     fields by the objects' metadata (query.TagColumns).
//  3. With brokers, the tail — offsets Last(p)+1 up to the high watermark
//     at that moment, records keyed "<run>/…" — is read into memory,
//     decoded and sorted.
//  4. Run merges the per-measurement streams and the tail with a heap and
//     calls emit once per sample, checking that the order strictly
//     increases (a duplicate would fail loudly rather than be replayed
//     twice).
//
// Emitters: LineWriter prints canonical lines; the Outputs produce records
// into a topic — Producer (idempotent) and TxnProducer (transactions);
// Pacer spaces samples out by sample time. RawRecords reads the raw
// objects of a topic for backfill. RunInto feeds a Replay or RawRecords
// into an Output, leaving out what an earlier run of the job committed;
// Finish closes an Output even after Ctrl-C, so what was produced is
// committed.
//
// # Transactions and resume (TxnProducer)
//
//  1. OpenTxn checks ApiVersions for the transaction keys (24-26, 28;
//     ErrNoTransactions otherwise), then InitProducerID with the job's
//     transactional id: the epoch bump fences a zombie of an earlier run
//     and the broker aborts its open transaction before answering.
//  2. It reads the job's progress: the offset of the group named after the
//     transactional id for (output topic, partition 0) — the number of
//     records committed — and its metadata, the Position of the last one
//     and a hash of the job's selection.
//  3. The caller asks Skip(pos) for every record in its order and produces
//     the rest; positions strictly increase (time, partition, offset for
//     telemetry; partition, offset for raw records).
//  4. Every CommitRecords records or CommitInterval, the transaction is
//     flushed, the new progress is added with AddOffsetsToTxn and
//     TxnOffsetCommit, and EndTxn commits output and progress at once. A
//     failure aborts it. A crash leaves it to the broker to abort.
//
// # Goroutines and locks
//
// The package starts no goroutine of its own: Open and Run work on the
// caller's goroutine (the query engine fetches objects on goroutines it
// waits for; the Kafka clients are closed before Open returns, except the
// Producer's and TxnProducer's, closed by Close). Their delivery callbacks
// run on the client's goroutines and only touch atomics and mu, which
// guards the first delivery error; all other TxnProducer state belongs to
// the caller's goroutine. Stats are atomics, safe to read from a metrics
// scrape.
package replay
