package iceberg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/store"
)

// PropWatermarks is the table property where Expire keeps the watermarks
// (see the package doc) of the snapshots it expires, as
// topic/partition:last, comma-separated: the summaries that carried them
// are gone, and a sink reconciling a partition must not add its flushes
// again.
const PropWatermarks = "simtel.watermarks"

// DefaultMetadataKeep is how many earlier metadata files of a table Expire
// leaves by default, besides the current one: what a reader that loaded
// the table a few commits ago still opens.
const DefaultMetadataKeep = 10

// DefaultOrphanAge is the default ExpireOptions.OrphanAge.
const DefaultOrphanAge = time.Hour

// ExpireOptions configure Expire.
type ExpireOptions struct {
	// OlderThan: snapshots committed longer ago than this are expired,
	// except the current one and the RetainLast newest.
	OlderThan time.Duration
	// RetainLast is how many of a table's newest snapshots stay whatever
	// their age; at least 1 (the default).
	RetainLast int
	// MetadataKeep is how many earlier metadata files of a table stay,
	// besides the current one. 0: DefaultMetadataKeep; negative: only
	// the newest, which the catalog names as the previous one.
	MetadataKeep int
	// OrphanAge: a file under a table's metadata directory that nothing
	// retained references is deleted only when it is older than this, so
	// a commit that wrote its files but has not swapped the catalog yet
	// keeps them. 0: DefaultOrphanAge.
	OrphanAge time.Duration
	// Protected reports lake keys that simtel's catalog still names (a
	// visible object, or one whose retention or compaction has not yet
	// deleted it): such a data file is never deleted here. Required.
	Protected func(key string) bool
	// DryRun plans and reports, changes nothing.
	DryRun bool
	// Progress, when set, is called after each table.
	Progress func(done, total int, t TableExpiry)
	// Now is the current time for the file ages (default time.Now).
	// Snapshot ages are measured by iceberg-go against the real clock.
	Now func() time.Time
}

// TableExpiry is what Expire did (or would do) to one table.
type TableExpiry struct {
	Table     string        `json:"table"`
	Snapshots int           `json:"snapshots_expired"`
	Retained  int           `json:"snapshots_retained"`
	Files     []ExpiredFile `json:"files"`
	Bytes     int64         `json:"bytes"`
}

// ExpiredFile is one file Expire deletes (or would).
type ExpiredFile struct {
	Path  string `json:"path"`
	Kind  string `json:"kind"` // data, manifest, manifest-list, metadata, orphan
	Bytes int64  `json:"bytes"`
}

// ExpireResult sums Expire's work over the tables.
type ExpireResult struct {
	Tables    []TableExpiry
	Snapshots int
	Files     int
	Bytes     int64
}

// Expire expires old snapshots of every table (namespaces telemetry and
// raw) and deletes the files no retained snapshot references: manifest
// lists and manifests of expired snapshots, data files only they
// referenced and simtel's catalog does not name (Protected), metadata
// files beyond MetadataKeep, and files under a table's metadata directory
// that nothing references (left by a commit that failed) once older than
// OrphanAge. The current snapshot, its metadata file and the catalog's
// previous one are never deleted. A table's expiry is one commit that
// asserts the snapshot it was planned on; a table that moves meanwhile is
// planned again.
func (l *Lake) Expire(ctx context.Context, o ExpireOptions) (ExpireResult, error) {
	var res ExpireResult
	if o.Protected == nil {
		return res, errors.New("iceberg: expire needs simtel's catalog to protect the objects it names")
	}
	if o.RetainLast < 1 {
		o.RetainLast = 1
	}
	if o.OlderThan < 0 {
		return res, fmt.Errorf("iceberg: expire: negative age %v", o.OlderThan)
	}
	if o.MetadataKeep == 0 {
		o.MetadataKeep = DefaultMetadataKeep
	}
	if o.OrphanAge == 0 {
		o.OrphanAge = DefaultOrphanAge
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	keys, err := l.tableKeys(ctx)
	if err != nil {
		return res, err
	}
	var errs []error
	for i, key := range keys {
		te, err := l.expireTable(ctx, key, o)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.Tables = append(res.Tables, te)
		res.Snapshots += te.Snapshots
		res.Files += len(te.Files)
		res.Bytes += te.Bytes
		if o.Progress != nil {
			o.Progress(i+1, len(keys), te)
		}
	}
	return res, errors.Join(errs...)
}

// tableKeys lists the keys of every table of Namespace and RawNamespace,
// sorted.
func (l *Lake) tableKeys(ctx context.Context) ([]string, error) {
	var keys []string
	for _, ns := range []string{Namespace, RawNamespace} {
		for id, err := range l.cat.ListTables(ctx, table.Identifier{ns}) {
			if err != nil {
				if ns == RawNamespace && strings.Contains(strings.ToLower(err.Error()), "does not exist") {
					break // no raw topic yet
				}
				return nil, fmt.Errorf("iceberg: cannot list the tables of %s: %w", ns, err)
			}
			name := id[len(id)-1]
			if ns == RawNamespace {
				name = rawKey(name)
			}
			keys = append(keys, name)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// expireTable expires one table, planning again when a commit races it.
func (l *Lake) expireTable(ctx context.Context, key string, o ExpireOptions) (TableExpiry, error) {
	te := TableExpiry{Table: strings.Join(identOf(key), ".")}
	for attempt := 0; ; attempt++ {
		tbl, err := l.loadTable(ctx, identOf(key))
		if err != nil {
			return te, err
		}
		post, expired, err := l.planExpiry(tbl, o)
		if err != nil {
			return te, fmt.Errorf("iceberg: expire %s: %w", te.Table, err)
		}
		files, err := l.unreferenced(ctx, tbl, post, expired, o)
		if err != nil {
			return te, fmt.Errorf("iceberg: expire %s: %w", te.Table, err)
		}
		te.Snapshots, te.Retained, te.Files, te.Bytes = len(expired), len(post.Metadata().Snapshots()), files, 0
		for _, f := range files {
			te.Bytes += f.Bytes
		}
		if o.DryRun {
			return te, nil
		}
		if len(expired) > 0 {
			if _, err := post.commit(ctx); err != nil {
				if conflict(err) && attempt+1 < commitAttempts {
					continue
				}
				return te, fmt.Errorf("iceberg: cannot commit the expiry of %d snapshots of %s: %w", len(expired), te.Table, err)
			}
			// The sink's cached copy is now one commit behind.
			l.mu.Lock()
			delete(l.tables, key)
			l.mu.Unlock()
		}
		fs, err := tbl.FS(ctx)
		if err != nil {
			return te, err
		}
		var errs []error
		for _, f := range files {
			if err := fs.Remove(f.Path); err != nil && !notExist(err) {
				errs = append(errs, fmt.Errorf("cannot delete %s: %w", f.Path, err))
			}
		}
		return te, errors.Join(errs...)
	}
}

// staged is a table with an expiry staged on it.
type staged struct {
	tx  *table.Transaction
	tbl *table.Table
}

func (s staged) Metadata() table.Metadata { return s.tbl.Metadata() }

func (s staged) commit(ctx context.Context) (*table.Table, error) { return s.tx.Commit(ctx) }

// planExpiry stages the expiry of tbl's old snapshots, the watermarks of
// every snapshot kept in PropWatermarks, and returns the staged table and
// the snapshots it drops.
func (l *Lake) planExpiry(tbl *table.Table, o ExpireOptions) (staged, []table.Snapshot, error) {
	tx := tbl.NewTransaction()
	if cur := tbl.CurrentSnapshot(); cur != nil {
		m := l.watermarks("", &cached{tbl: tbl, snap: -1})
		if s := formatMarks(m); s != "" && s != tbl.Properties()[PropWatermarks] {
			if err := tx.SetProperties(iceberg.Properties{PropWatermarks: s}); err != nil {
				return staged{}, nil, err
			}
		}
	}
	err := tx.ExpireSnapshots(table.WithOlderThan(o.OlderThan), table.WithRetainLast(o.RetainLast),
		// Files are deleted here, after the simtel catalog check.
		table.WithPostCommit(false))
	if err != nil {
		return staged{}, nil, err
	}
	st, err := tx.StagedTable()
	if err != nil {
		return staged{}, nil, err
	}
	kept := map[int64]bool{}
	for _, s := range st.Metadata().Snapshots() {
		kept[s.SnapshotID] = true
	}
	var expired []table.Snapshot
	for _, s := range tbl.Metadata().Snapshots() {
		if !kept[s.SnapshotID] {
			expired = append(expired, s)
		}
	}
	return staged{tx: tx, tbl: st.Table}, expired, nil
}

// unreferenced lists the files to delete once post is committed.
func (l *Lake) unreferenced(ctx context.Context, pre *table.Table, post staged, expired []table.Snapshot, o ExpireOptions) ([]ExpiredFile, error) {
	fs, err := pre.FS(ctx)
	if err != nil {
		return nil, err
	}
	// Everything a retained snapshot references stays.
	keep := map[string]bool{pre.MetadataLocation(): true}
	log := slices.Collect(pre.Metadata().PreviousFiles())
	earlier := log
	if len(expired) > 0 {
		// The expiry's commit makes the current file an earlier one.
		earlier = append(slices.Clip(log), table.MetadataLogEntry{MetadataFile: pre.MetadataLocation()})
	}
	for i, e := range earlier {
		// The newest MetadataKeep earlier files stay, and always the
		// newest: it is the catalog's previous_metadata_location.
		if len(earlier)-i <= max(o.MetadataKeep, 1) {
			keep[e.MetadataFile] = true
		}
	}
	for _, s := range post.Metadata().Snapshots() {
		keep[s.ManifestList] = true
		mans, err := s.Manifests(fs)
		if err != nil {
			return nil, fmt.Errorf("cannot read the manifest list %s of retained snapshot %d: %w", s.ManifestList, s.SnapshotID, err)
		}
		for _, m := range mans {
			if keep[m.FilePath()] {
				continue
			}
			keep[m.FilePath()] = true
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					return nil, fmt.Errorf("cannot read manifest %s: %w", m.FilePath(), err)
				}
				keep[e.DataFile().FilePath()] = true
			}
		}
	}
	var out []ExpiredFile
	seen := map[string]bool{}
	add := func(path, kind string, size int64) {
		if keep[path] || seen[path] {
			return
		}
		seen[path] = true
		out = append(out, ExpiredFile{Path: path, Kind: kind, Bytes: size})
	}
	for _, s := range expired {
		mans, err := s.Manifests(fs)
		if err != nil {
			if notExist(err) {
				continue // an earlier expiry deleted it, then lost its commit
			}
			return nil, fmt.Errorf("cannot read the manifest list %s of snapshot %d: %w", s.ManifestList, s.SnapshotID, err)
		}
		for _, m := range mans {
			if keep[m.FilePath()] || seen[m.FilePath()] {
				continue
			}
			for e, err := range m.Entries(fs, false) {
				if err != nil {
					if notExist(err) {
						break
					}
					return nil, fmt.Errorf("cannot read manifest %s: %w", m.FilePath(), err)
				}
				df := e.DataFile()
				k, inLake := l.keyOf(df.FilePath())
				if !inLake || o.Protected(k) {
					continue
				}
				add(df.FilePath(), "data", df.FileSizeBytes())
			}
			add(m.FilePath(), "manifest", m.Length())
		}
	}
	// What is left under the metadata directory: manifest lists of
	// expired snapshots, metadata files beyond the count, and orphans.
	dir := strings.TrimSuffix(pre.Location(), "/") + "/metadata/"
	prefix, inLake := l.keyOf(dir)
	if !inLake {
		return out, nil
	}
	objs, err := l.st.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("cannot list %s: %w", dir, err)
	}
	lists := map[string]bool{}
	for _, s := range expired {
		lists[s.ManifestList] = true
	}
	logged := map[string]bool{}
	for _, e := range log {
		logged[e.MetadataFile] = true
	}
	cutoff := o.Now().Add(-o.OrphanAge)
	for _, ob := range objs {
		path := l.path(ob.Key)
		switch {
		case keep[path] || seen[path]:
		case lists[path]:
			add(path, "manifest-list", ob.Size)
		case logged[path]:
			add(path, "metadata", ob.Size)
		case ob.ModTime.Before(cutoff):
			kind := "orphan"
			if strings.HasSuffix(path, ".metadata.json") {
				kind = "metadata"
			}
			add(path, kind, ob.Size)
		}
	}
	return out, nil
}

// notExist reports a file that is not there.
func notExist(err error) bool {
	if errors.Is(err, store.ErrNotFound) {
		return true
	}
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "no such file") || strings.Contains(s, "not found") || strings.Contains(s, "nosuchkey")
}

// formatMarks writes marks as topic/partition:last, sorted.
func formatMarks(m marks) string {
	out := make([]string, 0, len(m))
	for p, last := range m {
		out = append(out, p.String()+":"+strconv.FormatInt(last, 10))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// parseMarks reads formatMarks' output; malformed items are skipped.
func parseMarks(s string) marks {
	out := marks{}
	for _, item := range strings.Split(s, ",") {
		tp, lastS, ok := strings.Cut(strings.TrimSpace(item), ":")
		i := strings.LastIndexByte(tp, '/')
		if !ok || i <= 0 {
			continue
		}
		p, err1 := strconv.ParseInt(tp[i+1:], 10, 32)
		last, err2 := strconv.ParseInt(lastS, 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out[part{tp[:i], int32(p)}] = last
	}
	return out
}

// keyOf is the lake key of a file URL of the lake.
func (l *Lake) keyOf(path string) (string, bool) { return strings.CutPrefix(path, l.root+"/") }

// CatalogKeys is ExpireOptions.Protected for simtel's catalog as snap
// holds it: every object a flush or a compaction wrote or replaced. Their
// deletion is the catalog's (retention, compaction), after its grace.
func CatalogKeys(snap *catalog.Snapshot) func(key string) bool {
	named := map[string]bool{}
	for o := range snap.Written() {
		named[o.Key] = true
	}
	for _, cps := range [][]catalog.Compaction{snap.Compactions, snap.Skipped} {
		for _, cp := range cps {
			for _, k := range cp.Replaced {
				named[k] = true
			}
		}
	}
	for _, ex := range snap.Expirations {
		for _, k := range ex.Keys {
			named[k] = true
		}
	}
	return func(key string) bool { return named[key] }
}
