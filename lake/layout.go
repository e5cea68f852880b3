// Package lake is the layout of simtel's Parquet lake: where the sink puts
// each object and how readers find them. The object store lives in
// lake/store, the catalog of what the lake holds in lake/catalog.
//
// Keys (relative to the lake root, "/"-separated):
//
//	telemetry/<measurement>/run=<run>/date=<YYYY-MM-DD>/<topic>-<partition>-<first>-<last>.parquet
//	raw/<topic>/date=<YYYY-MM-DD>/<topic>-<partition>-<first>-<last>.parquet
//	deadletter/<topic>/date=<YYYY-MM-DD>/<topic>-<partition>-<first>-<last>.parquet
//	_catalog/…  (see lake/catalog)
//
// <first> and <last> are the inclusive Kafka offset range of the flush that
// wrote the object, zero-padded to 20 digits so keys sort by offset. Every
// object of one flush of one partition carries the same range, so the name is
// fixed by topic, partition and offsets: a sink that crashes and redoes a
// flush writes the same keys again. Path segments are escaped with
// EscapeSegment so any measurement or run name is a single, Hive-readable
// directory name.
package lake

import (
	"fmt"
	"strings"
	"time"
)

// Object kinds, as recorded in the catalog.
const (
	KindTelemetry  = "telemetry"
	KindRaw        = "raw"
	KindDeadLetter = "deadletter"
)

// ObjectName is the file name shared by every object of one flush.
func ObjectName(topic string, partition int32, first, last int64) string {
	return fmt.Sprintf("%s-%d-%020d-%020d.parquet", EscapeSegment(topic), partition, first, last)
}

// Date is the UTC day of a timestamp as used in date= partitions.
func Date(t time.Time) string { return t.UTC().Format("2006-01-02") }

// TelemetryKey is the key of the decoded-telemetry object of one measurement,
// run and day written by a flush.
func TelemetryKey(measurement, run, date, topic string, partition int32, first, last int64) string {
	return "telemetry/" + EscapeSegment(measurement) + "/run=" + EscapeSegment(run) +
		"/date=" + date + "/" + ObjectName(topic, partition, first, last)
}

// RawKey is the key of the raw object of a topic that is not decoded.
func RawKey(topic, date string, partition int32, first, last int64) string {
	return "raw/" + EscapeSegment(topic) + "/date=" + date + "/" + ObjectName(topic, partition, first, last)
}

// DeadLetterKey is the key of the dead-letter object holding the records of a
// flush that could not be decoded.
func DeadLetterKey(topic, date string, partition int32, first, last int64) string {
	return "deadletter/" + EscapeSegment(topic) + "/date=" + date + "/" + ObjectName(topic, partition, first, last)
}

// EscapeSegment makes s one safe path segment: bytes outside [A-Za-z0-9._-]
// become %XX (as Hive escapes partition values), and the empty string
// becomes "__none__" (a sample without a run tag lands in run=__none__).
func EscapeSegment(s string) string {
	if s == "" {
		return NoValue
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' && i > 0 || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// NoValue stands for an empty run or measurement in a path.
const NoValue = "__none__"
