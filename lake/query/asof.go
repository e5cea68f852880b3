package query

import (
	"context"
	"slices"
	"strings"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
)

// TableFile is a telemetry data file of an Iceberg table's snapshot.
type TableFile struct {
	Measurement string
	Key         string
	Rows        int64
	Bytes       int64
}

// OpenFiles opens an engine over telemetry files chosen elsewhere (the
// data files of Iceberg snapshots, for time travel), which may include
// objects the catalog no longer shows (replaced by a compaction). Each
// file takes the catalog's description of its object when the catalog
// has one (a flush's or a compaction's), for f's run, topic and time
// filters; raw and dead-letter objects are not read.
func OpenFiles(ctx context.Context, snap *catalog.Snapshot, files []TableFile, cache Fetcher, f Filter, o Options) (*Engine, error) {
	known := map[string]catalog.Object{}
	for obj := range snap.Written() {
		known[obj.Key] = obj
	}
	var objs []catalog.Object
	for _, tf := range files {
		obj, ok := known[tf.Key]
		if !ok {
			obj = catalog.Object{Key: tf.Key, Kind: lake.KindTelemetry, Measurement: tf.Measurement, Rows: tf.Rows, Bytes: tf.Bytes}
		}
		if !keep(obj, ok, f) {
			continue
		}
		objs = append(objs, obj)
	}
	slices.SortFunc(objs, func(a, b catalog.Object) int { return strings.Compare(a.Key, b.Key) })
	if o.FieldTypes == nil {
		o.FieldTypes = snap.FieldTypes
	}
	f.NoRaw = true
	return OpenObjects(ctx, objs, cache, f, o)
}

// keep applies f's choice of objects to a file; described tells whether
// obj is the catalog's description (with run, times) or only the table's.
func keep(obj catalog.Object, described bool, f Filter) bool {
	if len(f.Measurements) > 0 && !slices.Contains(f.Measurements, obj.Measurement) {
		return false
	}
	if f.Topic != "" && topicOfTelemetry(obj.Key) != f.Topic {
		return false
	}
	if !described {
		return f.Run == "" // rows are still cut to From/To by the views
	}
	run := obj.Run
	if run == "" {
		run = lake.NoValue
	}
	switch {
	case f.Run != "" && run != f.Run:
		return false
	case !f.From.IsZero() && obj.MaxTime.Before(f.From):
		return false
	case !f.To.IsZero() && !obj.MinTime.Before(f.To):
		return false
	}
	return true
}
