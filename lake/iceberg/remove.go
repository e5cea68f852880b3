package iceberg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// SummaryExpired is the summary key of a snapshot that removes data files
// for retention: the reason, as simtel's expiration record has it.
const SummaryExpired = "simtel.expired"

// RemoveObjects removes the data files of the given lake objects from
// every table that holds them, in one snapshot per table, and returns how
// many it removed. Retention calls it for whole expired partitions (run,
// day): each of their objects is a whole data file, so removing files
// removes exactly the partition's rows. Files already absent from a table
// are skipped, so a retried call removes nothing twice. The files stay in
// the store (retention deletes them after its grace).
func (l *Lake) RemoveObjects(ctx context.Context, keys []string, reason string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[l.path(k)] = true
	}
	tables, err := l.tableKeys(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, key := range tables {
		m, err := l.removeFromTable(ctx, key, want, reason)
		n += m
		if err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// removeFromTable removes the files of want that one table's current
// snapshot holds, rebuilding on the new snapshot when a commit races it.
func (l *Lake) removeFromTable(ctx context.Context, key string, want map[string]bool, reason string) (int, error) {
	id := strings.Join(identOf(key), ".")
	for attempt := 0; ; attempt++ {
		tbl, err := l.loadTable(ctx, identOf(key))
		if err != nil {
			return 0, err
		}
		dfs, err := l.liveFiles(ctx, tbl, want)
		if err != nil {
			return 0, fmt.Errorf("iceberg: table %s: %w", id, err)
		}
		if len(dfs) == 0 {
			return 0, nil
		}
		tx := tbl.NewTransaction()
		err = tx.ReplaceDataFilesWithDataFiles(ctx, dfs, nil, iceberg.Properties{SummaryExpired: reason})
		if err == nil {
			_, err = tx.Commit(ctx)
		}
		if conflict(err) && attempt+1 < commitAttempts {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("iceberg: cannot remove %d expired files from %s: %w", len(dfs), id, err)
		}
		l.mu.Lock()
		delete(l.tables, key) // the sink's cached copy is one commit behind
		l.mu.Unlock()
		return len(dfs), nil
	}
}

// liveFiles returns the data files of tbl's current snapshot whose paths
// want holds.
func (l *Lake) liveFiles(ctx context.Context, tbl *table.Table, want map[string]bool) ([]iceberg.DataFile, error) {
	cur := tbl.CurrentSnapshot()
	if cur == nil {
		return nil, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	mans, err := cur.Manifests(fs)
	if err != nil {
		return nil, fmt.Errorf("cannot read the manifest list %s: %w", cur.ManifestList, err)
	}
	var out []iceberg.DataFile
	for _, m := range mans {
		if m.ManifestContent() != iceberg.ManifestContentData {
			continue
		}
		for e, err := range m.Entries(fs, true) {
			if err != nil {
				return nil, fmt.Errorf("cannot read manifest %s: %w", m.FilePath(), err)
			}
			if df := e.DataFile(); want[df.FilePath()] {
				out = append(out, df)
			}
		}
	}
	return out, nil
}
