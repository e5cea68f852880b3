// Package catalog records what the lake holds, so readers never list the
// bucket. The sink appends one immutable Entry per flush of a partition,
// after every object of the flush is durable; the entry is the commit point
// of the flush (see sink/ for the exactly-once protocol).
//
// Keys:
//
//	_catalog/flush/<topic>/<partition>/<first>-<last>.json   one Entry per flush (offsets 20-digit padded)
//	_catalog/pending/<topic>/<partition>.json                 the Intent of a flush in progress
//	_catalog/runs/<run>.json                                  RunState: a run marked complete
//	_catalog/compact/<id>.json                                a Compaction: new objects replace old ones
//	_catalog/snap/<topic>/<partition>/<first>-<last>.json     many flush entries merged (CompactEntries)
//	_catalog/types/<measurement>/<field>.json                 a FieldType: fixed at first sight, never rewritten
//	_catalog/expire/<id>.json                                 an Expiration: objects retention removed
//	_catalog/retention/<scope>.json                           a retention policy (lake/retention)
//
// Topic, run, measurement and field segments are escaped with lake.EscapeSegment. Readers use
// Load and the Snapshot it returns; see docs/design/lake-catalog.md for the protocol.
package catalog

import "time"

// Entry is one committed flush of one partition of one topic.
type Entry struct {
	Topic       string    `json:"topic"`
	Partition   int32     `json:"partition"`
	FirstOffset int64     `json:"first_offset"`
	LastOffset  int64     `json:"last_offset"` // inclusive
	Records     int64     `json:"records"`     // Kafka records consumed in the range
	Objects     []Object  `json:"objects"`
	Written     time.Time `json:"written"`
	Sink        string    `json:"sink,omitempty"` // the sink instance that wrote it, for operators
}

// Object is one Parquet object written by a flush.
type Object struct {
	Key         string    `json:"key"`
	Kind        string    `json:"kind"` // lake.KindTelemetry, KindRaw, KindDeadLetter
	Measurement string    `json:"measurement,omitempty"`
	Run         string    `json:"run,omitempty"`
	Date        string    `json:"date"`
	MinTime     time.Time `json:"min_time"`
	MaxTime     time.Time `json:"max_time"`
	Rows        int64     `json:"rows"`
	Bytes       int64     `json:"bytes"`
	Columns     []string  `json:"columns,omitempty"`
}

// Intent is written before a flush uploads its objects: a sink that restarts
// and finds an intent at its resume offset redoes exactly that range, so it
// writes the same object keys again instead of leaving orphans.
type Intent struct {
	Topic       string `json:"topic"`
	Partition   int32  `json:"partition"`
	FirstOffset int64  `json:"first_offset"`
	LastOffset  int64  `json:"last_offset"`
}

// RunState marks a run complete in the lake (written when the scheduler
// publishes the run's completion on the jobs topic).
type RunState struct {
	Run      string    `json:"run"`
	State    string    `json:"state"` // completed, failed, cancelled
	ExitCode int       `json:"exit_code"`
	Ended    time.Time `json:"ended"`
}
