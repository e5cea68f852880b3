package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
	"github.com/simtel/simtel/sink"
)

// LakeQueryConfig sizes the lake query benchmark.
type LakeQueryConfig struct {
	// Samples is the number of samples in the lake (default 1,000,000).
	Samples int
	// Dir is the lake directory (required). A lake already there with the
	// same parameters (recorded in Dir/bench.json) is reused, so a second
	// run times only the queries.
	Dir string
	// Runs is how many runs the samples belong to (default 10); samples of
	// all runs interleave, as on a shared cluster.
	Runs int
	// Partitions of the telemetry topic (default 4).
	Partitions int32
	// FlushSamples is how many offsets of a partition one flush covers
	// (default 250,000): it sets the object count.
	FlushSamples int
	// Progress receives a line per phase; nil: quiet.
	Progress io.Writer
}

func (c *LakeQueryConfig) defaults() error {
	if c.Dir == "" {
		return errors.New("lake query bench: Dir is required")
	}
	if c.Samples <= 0 {
		c.Samples = 1_000_000
	}
	if c.Runs <= 0 {
		c.Runs = 10
	}
	if c.Partitions <= 0 {
		c.Partitions = 4
	}
	if c.FlushSamples <= 0 {
		c.FlushSamples = 250_000
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// LakeQueryResult is what the benchmark measured.
type LakeQueryResult struct {
	Samples      int64   `json:"samples"`
	Objects      int     `json:"objects"`    // telemetry objects in the lake
	LakeBytes    int64   `json:"lake_bytes"` // their total size
	BuildSeconds float64 `json:"build_seconds,omitempty"`
	Query        string  `json:"query"`
	Run          string  `json:"run"`
	RunObjects   int     `json:"run_objects"` // objects the query reads
	RunBytes     int64   `json:"run_bytes"`
	Rows         int64   `json:"rows"` // rows aggregated
	Avg          float64 `json:"avg"`
	Max          float64 `json:"max"`
	// Cold: catalog load, engine setup (views over the run's objects, their
	// footers read) and the first execution, in a fresh engine.
	CatalogSeconds float64 `json:"catalog_seconds"`
	OpenSeconds    float64 `json:"open_seconds"`
	ColdSeconds    float64 `json:"cold_seconds"`
	// Warm: the same query again on the open engine (median of 5).
	WarmSeconds float64 `json:"warm_seconds"`
}

// RunLakeQueryBench builds (or reuses) a lake of cfg.Samples samples with
// the sink's encoder and times "avg and max of one field of one run"
// through the catalog and DuckDB.
func RunLakeQueryBench(ctx context.Context, cfg LakeQueryConfig) (LakeQueryResult, error) {
	var res LakeQueryResult
	if err := cfg.defaults(); err != nil {
		return res, err
	}
	st, err := store.Open(ctx, cfg.Dir, store.Options{})
	if err != nil {
		return res, err
	}
	cat := catalog.New(st)
	stamp := fmt.Sprintf(`{"samples":%d,"runs":%d,"partitions":%d,"flush":%d}`, cfg.Samples, cfg.Runs, cfg.Partitions, cfg.FlushSamples)
	stampFile := filepath.Join(cfg.Dir, "bench.json")
	if b, err := os.ReadFile(stampFile); err != nil || string(b) != stamp {
		if err := os.RemoveAll(cfg.Dir); err != nil {
			return res, err
		}
		if st, err = store.Open(ctx, cfg.Dir, store.Options{}); err != nil {
			return res, err
		}
		cat = catalog.New(st)
		start := time.Now()
		if err := buildBenchLake(ctx, st, cat, cfg); err != nil {
			return res, err
		}
		res.BuildSeconds = time.Since(start).Seconds()
		if err := os.WriteFile(stampFile, []byte(stamp), 0o644); err != nil {
			return res, err
		}
	}

	res.Run = "r" + strconv.Itoa(cfg.Runs/2)
	res.Query = "SELECT count(*), avg(usage_user), max(usage_user) FROM cpu"
	start := time.Now()
	snap, err := cat.Load(ctx)
	if err != nil {
		return res, err
	}
	res.CatalogSeconds = time.Since(start).Seconds()
	for _, o := range snap.Objects(catalog.Filter{Kind: "telemetry"}) {
		res.Objects++
		res.LakeBytes += o.Bytes
		res.Samples += o.Rows
	}
	t1 := time.Now()
	eng, err := query.OpenObjects(ctx, query.Select(snap, query.Filter{Run: res.Run, Measurements: []string{"cpu"}}),
		store.NewCache(st, filepath.Join(cfg.Dir, ".cache"), 0), query.Filter{}, query.Options{})
	if err != nil {
		return res, err
	}
	defer eng.Close()
	res.OpenSeconds = time.Since(t1).Seconds()
	res.RunObjects, res.RunBytes = eng.Objects(), eng.Bytes()
	run := func() error {
		return eng.DB().QueryRowContext(ctx, res.Query).Scan(&res.Rows, &res.Avg, &res.Max)
	}
	if err := run(); err != nil {
		return res, eng.Explain(err)
	}
	res.ColdSeconds = time.Since(start).Seconds()
	var warm []float64
	for range 5 {
		t := time.Now()
		if err := run(); err != nil {
			return res, err
		}
		warm = append(warm, time.Since(t).Seconds())
	}
	res.WarmSeconds = median(warm)
	fmt.Fprintf(cfg.Progress, "lake query: %d samples, %d objects (%s); run %s: %d objects, %d rows; catalog %.3fs, open %.3fs, cold %.3fs, warm %.3fs\n",
		res.Samples, res.Objects, query.FormatBytes(res.LakeBytes), res.Run, res.RunObjects, res.Rows,
		res.CatalogSeconds, res.OpenSeconds, res.ColdSeconds, res.WarmSeconds)
	return res, nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// buildBenchLake writes the samples partition by partition, flush by flush,
// through the sink's encoder, as canonical lines: cpu (two float fields)
// and reward (a float and an integer step), 8 hosts per run, one sample per
// host every 10 ms.
func buildBenchLake(ctx context.Context, st store.Store, cat *catalog.Catalog, cfg LakeQueryConfig) error {
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC).UnixNano()
	perPart := (cfg.Samples + int(cfg.Partitions) - 1) / int(cfg.Partitions)
	start := time.Now()
	var line []byte
	var done int64
	for p := range cfg.Partitions {
		enc := sink.NewEncoder("telemetry", p, true)
		n := min(perPart, cfg.Samples-int(p)*perPart)
		for lo := 0; lo < n; lo += cfg.FlushSamples {
			hi := min(lo+cfg.FlushSamples, n)
			enc.Reset()
			for off := lo; off < hi; off++ {
				i := off*int(cfg.Partitions) + int(p) // global sample index
				run := i % cfg.Runs
				host := (i / cfg.Runs) % 8
				t := base + int64(i/(cfg.Runs*8))*10_000_000 + int64(host)*1000
				line = line[:0]
				if (i/(cfg.Runs*8))%4 == 3 { // every fourth tick is a reward sample
					line = fmt.Appendf(line, "reward,host=n%d,job=j%d,run=r%d,step=%d value=%g,step_i=%di %d", host, run, run, i/1000, float64(i%1000)/1000, i/1000, t)
				} else {
					line = fmt.Appendf(line, "cpu,host=n%d,job=j%d,run=r%d,step=%d usage_user=%g,usage_system=%g %d", host, run, run, i/1000, float64(i%997)/10, float64(i%89)/10, t)
				}
				enc.Add(&sink.Record{Offset: int64(off), Timestamp: time.Unix(0, t), Key: fmt.Appendf(nil, "r%d/n%d", run, host), Value: line})
			}
			objs, err := enc.Encode()
			if err != nil {
				return fmt.Errorf("cannot encode partition %d offsets %d-%d: %w", p, lo, hi-1, err)
			}
			e := catalog.Entry{Topic: "telemetry", Partition: p, FirstOffset: int64(lo), LastOffset: int64(hi - 1),
				Records: int64(hi - lo), Written: time.Now().UTC(), Sink: "bench"}
			for _, o := range objs {
				if err := st.Put(ctx, o.Key, bytes.NewReader(o.Data), int64(len(o.Data))); err != nil {
					return err
				}
				e.Objects = append(e.Objects, o.Entry)
			}
			if err := cat.Commit(ctx, e); err != nil {
				return err
			}
			done += int64(hi - lo)
			fmt.Fprintf(cfg.Progress, "lake query bench: built %d of %d samples (%.0f samples/s)\n", done, cfg.Samples, float64(done)/time.Since(start).Seconds())
		}
	}
	return nil
}
