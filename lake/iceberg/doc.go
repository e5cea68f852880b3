// Package iceberg publishes the lake as Apache Iceberg tables (format v2)
// through github.com/apache/iceberg-go, so that Spark, Trino, PyIceberg and
// DuckDB read one consistent, versioned table per measurement.
//
// # Tables
//
// The catalog is iceberg-go's SQL catalog: a SQLite file (sqlite:PATH,
// through the pure-Go modernc.org/sqlite driver) or PostgreSQL
// (postgres://...). Namespace telemetry holds one table per measurement and
// the table dlq (the sink's dead letters); namespace raw holds one table
// per topic the sink keeps raw (raw.<topic>: _partition, _offset,
// timestamp, key, value, headers, partitioned by day(timestamp)), whose
// objects are added with the same watermarks as telemetry's. A measurement table has the
// columns time (timestamptz, microseconds, UTC), _partition, _offset,
// _time_ns, run, then one column per tag (string) and per field (double,
// long, boolean, string; an unsigned field is a long), and is partitioned by
// identity(run) and day(time). The Parquet objects the sink writes are the
// table's data files as they are: they carry no Iceberg field ids, so every
// table has a name mapping (schema.name-mapping.default) that the package
// keeps in step with the schema. Table metadata and manifests live in the
// lake next to the data, under _iceberg/<namespace>/<table>/metadata/
// (file:// or s3:// through iceberg-go's IO).
//
// A field a table has not seen adds a column; files written before read it
// as null. Field types are fixed lake-wide at first sight (lake/catalog's
// FieldType), and a sample whose value has another type goes to the dead
// letters with the reason and its offset, so a field's column never changes
// type. A file whose column would (a tag and a field of one name) is not
// added; the commit's summary names it under simtel.rejected.
//
// # Exactly once
//
// simtel's own catalog entry stays the commit point of a flush (see sink/).
// The Iceberg commit comes after it: the objects of one or more committed
// entries are added to each table in one snapshot whose summary carries
// simtel.ranges, the topic/partition:first-last ranges it covers. A
// table's watermark for a topic partition is the highest last offset in
// the summaries of the current snapshot and its ancestors; a commit skips
// every object of an entry at or below the watermark, and it is built on
// the table's current snapshot and rejected by the catalog if another
// commit came first (iceberg-go's commit retry is left off so a commit is
// never replayed on a snapshot it was not checked against); it is then
// rebuilt on the new snapshot, watermarks read again.
//
// So an entry is added at most once. It is added at least once because
// its sink retries the commit until it succeeds or the partition moves,
// and a sink that takes a partition over (after a restart, a SIGKILL
// between the catalog and the Iceberg commit, or a rebalance) first calls
// Reconcile with the partition's catalog entries, before it consumes:
// what the catalog holds above each table's watermark is added then. A
// partition's entries therefore reach every table in offset order, which
// is what makes the watermark test sound.
//
// # Compaction and time travel
//
// A compaction of simtel's catalog (lake/compact) is applied to its table
// by Rewrite: one snapshot of operation replace deletes the replaced files
// and adds the merged one, its summary naming the compaction record
// (simtel.compaction). The compactor merges only files the table holds,
// and ReconcileCompactions, at the start of every compaction run, rewrites
// the tables for compactions a compactor committed to the catalog but not
// to Iceberg before it died. The replaced files stay in the lake while
// older snapshots name them: Snapshots, SnapshotAt and FilesAt read a
// table as of an earlier snapshot (simtel lake query --as-of).
//
// # Not yet
//
// Objects replaced by a compaction before Iceberg was turned on are not
// added (their rows are missing from the tables).
package iceberg
