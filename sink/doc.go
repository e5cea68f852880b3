// Package sink is simtel's lake connector: a Kafka consumer-group member
// that writes topics into the Parquet lake (lake/, lake/store,
// lake/catalog) exactly once.
//
// # Data path
//
// One poll loop (Run → loop) owns every assigned partition's buffer:
//
//	PollRecords → buffer.add (per partition)
//	   telemetry topics: lineproto.Decoder → table per (measurement, run, UTC date)
//	                     → dense columns; undecodable lines → dead letters
//	   other topics:     raw rows (key, value, headers)
//	→ flush trigger → buffer.encode (lake/schema's writers: encodeTable
//	  drives its column writer, tag dictionaries written as indexes; raw
//	  and dead-letter rows through schema.EncodeRecords) → the flush
//	  protocol below
//
// A table keeps one slot per row in every column (null where the line
// lacks the tag or field); tags hold indexes into a per-column
// dictionary, other strings are copied into one arena per partition, so the buffer holds no pointer per row and the garbage
// collector has little to scan. Encoding sorts rows by (time, offset),
// orders columns by name and writes no wall-clock time, so the same records
// always give byte-identical objects.
//
// # Exactly once
//
// The object keys of a flush are fixed by topic, partition and the offset
// range [a, b] it consumed (lake.TelemetryKey and friends). A flush:
//
//  1. records catalog.Intent{topic, partition, a, b};
//  2. uploads every object of the flush (all named with [a, b]);
//  3. checks the intent is still its own, then commits catalog.Entry —
//     the commit point: readers and the resume offset see the flush now;
//  4. clears the intent;
//  5. with an Iceberg catalog (Config.IcebergCatalog), joins the entry to
//     the batch of the interval; once every partition holding records
//     older than the batch's first flush has flushed them into it (or the
//     batch is FlushAge old), the batch is added to the Iceberg tables in
//     one commit per table, retrying until it succeeds (commitBatch);
//  6. commits Kafka offset b+1 — with Iceberg, after the batch's commit
//     (synchronously; a failure only costs a slower start, since the
//     catalog already holds the position).
//
// On assignment a partition resumes at max(Kafka commit, catalog Last+1).
// An intent whose first offset is that resume point is a flush that died
// between 1 and 4: the partition consumes exactly up to its last offset and
// writes the same range again, overwriting any objects it had uploaded with
// identical bytes. Intents below the resume point are stale and cleared.
// With Iceberg, the newly assigned partitions' catalog entries are then
// reconciled with the tables before consuming (lake/iceberg.Reconcile), so a
// sink that died between steps 3 and 5 loses no flush and none lands twice.
//
// # Goroutines and locks
//
// Run runs the poll loop on its own goroutine and starts the jobs-topic reader
// (watchJobs, a second group-less client) and the metrics server, and waits
// for all of them. kgo's group callbacks (adjustOffsets, onRevoked,
// onLost) run on kgo's goroutine; with BlockRebalanceOnPoll they never
// overlap a poll's processing, and sinker.mu makes that explicit. Flushes
// happen with mu held: while the store is down the loop stops polling, so
// memory stays bounded by FlushBytes per partition plus one flush.
package sink
