package iceberg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"
)

// SnapshotInfo describes one snapshot of a table, for picking one to time
// travel to.
type SnapshotInfo struct {
	ID        int64             `json:"snapshot_id"`
	Parent    int64             `json:"parent_id,omitempty"` // 0: none
	Time      time.Time         `json:"time"`
	Operation string            `json:"operation"` // append, replace, overwrite, delete
	Summary   map[string]string `json:"summary,omitempty"`
	Current   bool              `json:"current"`
}

// Snapshots lists the snapshots of a table of Namespace, oldest first.
func (l *Lake) Snapshots(ctx context.Context, name string) ([]SnapshotInfo, error) {
	tbl, err := l.Load(ctx, name)
	if err != nil {
		return nil, err
	}
	var cur int64 = -1
	if s := tbl.CurrentSnapshot(); s != nil {
		cur = s.SnapshotID
	}
	var out []SnapshotInfo
	for _, s := range tbl.Metadata().Snapshots() {
		si := SnapshotInfo{ID: s.SnapshotID, Time: time.UnixMilli(s.TimestampMs).UTC(), Current: s.SnapshotID == cur}
		if s.ParentSnapshotID != nil {
			si.Parent = *s.ParentSnapshotID
		}
		if s.Summary != nil {
			si.Operation = string(s.Summary.Operation)
			si.Summary = map[string]string(s.Summary.Properties)
		}
		out = append(out, si)
	}
	slices.SortStableFunc(out, func(a, b SnapshotInfo) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// Tables lists the telemetry tables of Namespace (the dead letters' table
// left out), sorted. A catalog without the namespace has none.
func (l *Lake) Tables(ctx context.Context) ([]string, error) {
	var out []string
	for id, err := range l.cat.ListTables(ctx, table.Identifier{Namespace}) {
		if err != nil {
			return nil, fmt.Errorf("iceberg: cannot list the tables of %s: %w", Namespace, err)
		}
		if n := id[len(id)-1]; n != DLQ {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Measurement is the measurement of a telemetry table (TableName's
// inverse).
func Measurement(tableName string) string {
	if tableName == DLQMeasurement {
		return DLQ
	}
	return tableName
}

// AsOf is a point in the tables' history: Time, and for the table whose
// snapshot was named (by id), that snapshot.
type AsOf struct {
	Time     time.Time
	Table    string // the table of Snapshot; empty when a time was given
	Snapshot int64
}

// ResolveAsOf reads a snapshot id (of any telemetry table) or an RFC 3339
// time.
func (l *Lake) ResolveAsOf(ctx context.Context, v string) (AsOf, error) {
	if id, err := strconv.ParseInt(v, 10, 64); err == nil {
		names, err := l.Tables(ctx)
		if err != nil {
			return AsOf{}, err
		}
		for _, n := range names {
			tbl, err := l.Load(ctx, n)
			if err != nil {
				return AsOf{}, err
			}
			if s := tbl.SnapshotByID(id); s != nil {
				return AsOf{Time: time.UnixMilli(s.TimestampMs).UTC(), Table: n, Snapshot: id}, nil
			}
		}
		return AsOf{}, fmt.Errorf("no table of %s has snapshot %d (it may have been expired; list them with simtel lake snapshots)", Namespace, id)
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return AsOf{}, fmt.Errorf("%q is neither a snapshot id nor an RFC 3339 time such as 2026-12-01T10:00:00Z", v)
	}
	return AsOf{Time: t.UTC()}, nil
}

// SnapshotAt is the snapshot of a table at a: the one named, or the one
// current at a.Time; ok is false when the table had none then.
func (l *Lake) SnapshotAt(ctx context.Context, name string, a AsOf) (id int64, ok bool, err error) {
	if a.Table == name {
		return a.Snapshot, true, nil
	}
	tbl, err := l.Load(ctx, name)
	if err != nil {
		return 0, false, err
	}
	s := tbl.SnapshotAsOf(a.Time.UnixMilli(), true)
	if s == nil {
		return 0, false, nil
	}
	return s.SnapshotID, true, nil
}

// File is a data file of a table's snapshot.
type File struct {
	Key   string // its lake key
	Rows  int64
	Bytes int64
}

// FilesAt lists the data files of a snapshot of a table of Namespace.
func (l *Lake) FilesAt(ctx context.Context, name string, snapshot int64) ([]File, error) {
	tbl, err := l.Load(ctx, name)
	if err != nil {
		return nil, err
	}
	if tbl.SnapshotByID(snapshot) == nil {
		return nil, fmt.Errorf("iceberg: table %s.%s has no snapshot %d (expired, or of another table)", Namespace, name, snapshot)
	}
	tasks, err := tbl.Scan(table.WithSnapshotID(snapshot)).PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("iceberg: cannot list the data files of %s.%s at snapshot %d: %w", Namespace, name, snapshot, err)
	}
	out := make([]File, 0, len(tasks))
	for _, t := range tasks {
		path := t.File.FilePath()
		if !strings.HasPrefix(path, l.root+"/") {
			return nil, fmt.Errorf("iceberg: table %s.%s: data file %s is not in the lake %s", Namespace, name, path, l.root)
		}
		out = append(out, File{Key: l.key(path), Rows: t.File.Count(), Bytes: t.File.FileSizeBytes()})
	}
	return out, nil
}

// ErrNoTables is returned by readers of a catalog without telemetry tables.
var ErrNoTables = errors.New("the Iceberg catalog has no telemetry tables")

// Redact hides the password of a catalog URL, for messages.
func Redact(catalogURL string) string { return redact(catalogURL) }
