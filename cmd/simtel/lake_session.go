package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// defaultLakeCacheDir is $XDG_CACHE_HOME/simtel/lake, else ~/.cache/simtel/lake.
func defaultLakeCacheDir() string {
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(os.TempDir(), "simtel-cache", "lake")
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "simtel", "lake")
}

// open opens the lake's store, its catalog and the local object cache.
func (f *lakeFlags) open(ctx context.Context) (store.Store, *catalog.Catalog, *store.Cache, error) {
	switch f.format {
	case "table", "csv", "json":
	default:
		return nil, nil, nil, fmt.Errorf("--format %q is not table, csv or json", f.format)
	}
	if f.cacheMaxMB < 0 {
		return nil, nil, nil, fmt.Errorf("--cache-max-mb %d is negative", f.cacheMaxMB)
	}
	log, err := f.g.logger()
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := store.Open(ctx, f.lake, store.Options{S3Endpoint: f.s3Endpoint, Region: f.s3Region})
	if err != nil {
		return nil, nil, nil, err
	}
	var opts []catalog.Option
	opts = append(opts, catalog.WithLogger(log.With("part", "lake")))
	if f.cacheDir != "" {
		opts = append(opts, catalog.WithCacheDir(f.cacheDir))
	}
	cacheDir := f.cacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(os.TempDir(), "simtel-lake-cache")
	}
	return st, catalog.New(st, opts...), store.NewCache(st, cacheDir, f.cacheMaxMB<<20), nil
}

// lakeSession is what a command that reads objects works with: the
// process logger and the opened lake.
type lakeSession struct {
	log    *slog.Logger
	engine query.Options // DuckDB's: the logger, download progress on stderr
	st     store.Store
	cat    *catalog.Catalog
	cache  *store.Cache
}

// session builds the logger and opens the lake for cmd.
func (f *lakeFlags) session(cmd *cobra.Command) (*lakeSession, error) {
	log, err := f.g.logger()
	if err != nil {
		return nil, err
	}
	st, cat, cache, err := f.open(cmd.Context())
	if err != nil {
		return nil, err
	}
	return &lakeSession{log: log, engine: query.Options{Logger: log, Progress: cmd.ErrOrStderr()}, st: st, cat: cat, cache: cache}, nil
}

// loadedSession is session followed by a read of the lake's catalog.
func (f *lakeFlags) loadedSession(cmd *cobra.Command) (*lakeSession, *catalog.Snapshot, error) {
	ls, err := f.session(cmd)
	if err != nil {
		return nil, nil, err
	}
	snap, err := ls.snapshot(cmd.Context())
	return ls, snap, err
}

// snapshot reads the lake's catalog.
func (s *lakeSession) snapshot(ctx context.Context) (*catalog.Snapshot, error) {
	snap, err := s.cat.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot load the catalog of %s: %w", s.st, err)
	}
	return snap, nil
}

// load opens the lake and reads its catalog, reporting skipped catalog
// files on stderr; it returns the store and catalog it read too.
func (f *lakeFlags) load(ctx context.Context, stderr io.Writer) (*catalog.Snapshot, store.Store, *catalog.Catalog, error) {
	st, cat, _, err := f.open(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if p, local := store.LocalPath(st, "x"); local {
		if _, err := os.Stat(filepath.Dir(p)); err != nil {
			return nil, nil, nil, fmt.Errorf("no lake at %s: %w (give --lake, or let 'simtel sink' or 'simtel dev' write one first)", st, err)
		}
	}
	snap, err := cat.Load(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, p := range snap.Problems {
		fmt.Fprintln(stderr, "warning:", p)
	}
	return snap, st, cat, nil
}

// lakeRange parses --from and --to.
func lakeRange(from, to string) (time.Time, time.Time, error) {
	f, err := parseLakeTime("--from", from)
	if err != nil {
		return f, f, err
	}
	t, err := parseLakeTime("--to", to)
	if err != nil {
		return f, t, err
	}
	if !f.IsZero() && !t.IsZero() && !f.Before(t) {
		return f, t, fmt.Errorf("--from %s is not before --to %s", from, to)
	}
	return f, t, nil
}

// parseLakeTime reads an RFC 3339 time (or a date) for a time filter flag.
func parseLakeTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s %q is not a time: use RFC 3339 like 2026-11-29T10:00:00Z, or a date like 2026-11-29", flag, v)
}
