package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/sink"
)

// sinkLake is where `simtel bench sink --lake` commits its flushes, as the
// sink does after encoding one: the objects into the store, the flush into
// simtel's catalog and, with an Iceberg catalog, into the Iceberg tables.
type sinkLake struct {
	st     store.Store
	cat    *catalog.Catalog
	ice    *iceberg.Lake // nil: no Iceberg tables
	fields int

	icebergTime time.Duration // wall time of the Iceberg commits
	icebergCPU  time.Duration // process CPU during them
	commits     int
}

func openSinkLake(ctx context.Context, cfg SinkBenchConfig) (*sinkLake, error) {
	if cfg.IcebergCatalog != "" && cfg.Lake == "" {
		return nil, fmt.Errorf("bench sink: --iceberg-catalog needs --lake, the directory the flushes go to")
	}
	if cfg.Lake == "" {
		return nil, nil
	}
	dir, err := filepath.Abs(cfg.Lake)
	if err != nil {
		return nil, fmt.Errorf("bench sink: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench sink: %w", err)
	}
	st, err := store.Open(ctx, "file://"+dir, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench sink: %w", err)
	}
	l := &sinkLake{st: st, cat: catalog.New(st), fields: cfg.Fields}
	if cfg.IcebergCatalog != "" {
		l.ice, err = iceberg.Open(ctx, iceberg.Options{Catalog: cfg.IcebergCatalog, Store: st})
		if err != nil {
			return nil, fmt.Errorf("bench sink: %w", err)
		}
	}
	return l, nil
}

func (l *sinkLake) close() {
	if l != nil && l.ice != nil {
		l.ice.Close()
	}
}

// types are the catalog types of sinkBenchLines' fields, as the sink
// fixes them at first sight.
func (l *sinkLake) types(string) map[string]string {
	out := map[string]string{}
	for j := range l.fields {
		switch {
		case j == l.fields-1 && l.fields > 2:
			out["done"] = catalog.TypeBoolean
		case j == l.fields-2 && l.fields > 2:
			out["episode"] = catalog.TypeInteger
		default:
			out[fmt.Sprintf("f%d", j)] = catalog.TypeFloat
		}
	}
	return out
}

// commit writes the objects of the flush of records first..last and
// commits it.
func (l *sinkLake) commit(ctx context.Context, objs []sink.Object, first, last int64) error {
	e := catalog.Entry{Topic: "telemetry", Partition: 0, FirstOffset: first, LastOffset: last, Records: last - first + 1, Written: time.Now().UTC()}
	for _, o := range objs {
		if err := l.st.Put(ctx, o.Key, bytes.NewReader(o.Data), int64(len(o.Data))); err != nil {
			return err
		}
		e.Objects = append(e.Objects, o.Entry)
	}
	if err := l.cat.Commit(ctx, e); err != nil {
		return err
	}
	if l.ice == nil {
		return nil
	}
	cpu0, t0 := selfCPU(), time.Now()
	err := l.ice.Commit(ctx, []catalog.Entry{e}, l.types, nil)
	l.icebergTime += time.Since(t0)
	l.icebergCPU += selfCPU() - cpu0
	l.commits++
	return err
}

// report adds the Iceberg figures to r.
func (l *sinkLake) report(r *SinkBenchResult) {
	if l == nil || l.ice == nil || l.commits == 0 {
		return
	}
	r.IcebergCommits = l.commits
	r.IcebergCPUSeconds = l.icebergCPU.Seconds()
	r.IcebergCommitMillis = float64(l.icebergTime.Milliseconds()) / float64(l.commits)
}
