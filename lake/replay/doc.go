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
// Emitters: LineWriter prints canonical lines, Producer produces records
// (idempotent; the delivery callbacks run on the client's goroutines and
// only touch atomics and a mutex-guarded first error), Pacer spaces them
// out by sample time. RawRecords reads the raw objects of a topic for
// backfill.
//
// # Goroutines and locks
//
// The package starts no goroutine of its own: Open and Run work on the
// caller's goroutine (the query engine fetches objects on goroutines it
// waits for; the Kafka clients are closed before Open returns, except the
// Producer's, closed by Close). Producer.mu guards only its first error;
// Stats are atomics, safe to read from a metrics scrape.
package replay
