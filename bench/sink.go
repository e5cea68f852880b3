package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/simtel/simtel/sink"
)

// The encoder side of `simtel bench sink`: how fast the sink turns
// canonical line-protocol records into Parquet objects, on one goroutine,
// and how much smaller the lake is than the broker's log.

// SinkBenchConfig configures RunSinkBench.
type SinkBenchConfig struct {
	Samples int    // records to encode (default 1,000,000)
	Tags    int    // tags per line besides host, job, step and run (default 2)
	Fields  int    // fields per line (default 4: floats, an integer, a boolean)
	Runs    int    // distinct runs (default 4); each run × measurement × day is one object
	Dir     string // if set, the objects are written there for inspection
	// Flushes splits the samples into this many flushes (default 1).
	Flushes int
	// Lake, when set, is a directory each flush is written to and
	// committed in, as the sink does (objects, then simtel's catalog),
	// all of it measured.
	Lake string
	// IcebergCatalog (sqlite:PATH or postgres://...; needs Lake) also
	// commits every flush to the lake's Iceberg tables, as `simtel sink
	// --iceberg-catalog` does.
	IcebergCatalog string
	// Progress, if not nil, gets a line once a second: samples buffered so
	// far and the rate (encoding the flush at the end is not counted).
	Progress      io.Writer
	ProgressEvery time.Duration // default 1s
}

// SinkBenchResult is the outcome, as JSON.
type SinkBenchResult struct {
	Samples               int     `json:"samples"`
	Objects               int     `json:"objects"`
	WallSeconds           float64 `json:"wall_seconds"`
	CPUSeconds            float64 `json:"cpu_seconds"` // process CPU (user+system, GC included) while encoding
	SamplesPerSec         float64 `json:"samples_per_sec"`
	SamplesPerCoreSec     float64 `json:"samples_per_core_sec"` // samples / CPU seconds: independent of GOMAXPROCS
	LineBytesPerSample    float64 `json:"line_bytes_per_sample"`
	BrokerBytesPerSample  float64 `json:"broker_bytes_per_sample"` // value + key + record overhead in a batch
	ParquetBytesPerSample float64 `json:"parquet_bytes_per_sample"`
	CompressionRatio      float64 `json:"compression_ratio"` // broker bytes / Parquet bytes
	DeadLetters           int64   `json:"dead_letters"`
	Flushes               int     `json:"flushes"`
	// With IcebergCatalog: the commits (one a flush, a snapshot per table
	// it touches), the process CPU during them and their mean latency.
	IcebergCommits      int     `json:"iceberg_commits,omitempty"`
	IcebergCPUSeconds   float64 `json:"iceberg_cpu_seconds,omitempty"`
	IcebergCommitMillis float64 `json:"iceberg_commit_ms,omitempty"`
}

// brokerRecordOverhead is what a record costs in a Kafka record batch
// beyond its key and value: length, attributes, timestamp and offset
// deltas, key and value lengths and the header count, as varints (about
// 10 bytes for small records), plus the batch header (61 bytes) shared by
// the records of a batch (a few hundred per batch from the agent).
const brokerRecordOverhead = 10.5

// sinkBenchLines makes canonical lines like the agent ships: sorted tags
// (the agent's host, job, run, step plus the sender's), float fields, an
// integer step counter and a boolean, nanosecond timestamps 1 ms apart per
// node.
func sinkBenchLines(cfg SinkBenchConfig) (lines, keys [][]byte, ts []int64) {
	rng := rand.New(rand.NewPCG(42, uint64(cfg.Samples)))
	meas := []string{"reward", "cpu", "mem", "gpu", "loss"}
	const hosts = 32
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC).UnixNano()
	lines = make([][]byte, cfg.Samples)
	keys = make([][]byte, cfg.Samples)
	ts = make([]int64, cfg.Samples)
	var b []byte
	for i := range lines {
		host := i % hosts
		run := "run-" + strconv.Itoa(i%cfg.Runs)
		t := t0 + int64(i/hosts)*int64(time.Millisecond) + int64(rng.IntN(1000))
		b = append(b[:0], meas[i%len(meas)]...)
		for j := 0; j < cfg.Tags; j++ {
			b = fmt.Appendf(b, ",env%d=cartpole-%d", j, rng.IntN(4))
		}
		b = fmt.Appendf(b, ",host=node%03d,job=%d,run=%s,step=0 ", host, 100000+i%cfg.Runs, run)
		for j := 0; j < cfg.Fields; j++ {
			if j > 0 {
				b = append(b, ',')
			}
			switch {
			case j == cfg.Fields-1 && cfg.Fields > 2:
				b = fmt.Appendf(b, "done=%v", rng.IntN(10) == 0)
			case j == cfg.Fields-2 && cfg.Fields > 2:
				b = fmt.Appendf(b, "episode=%di", i/hosts)
			default:
				b = strconv.AppendFloat(append(b, fmt.Sprintf("f%d=", j)...), float64(rng.IntN(1_000_000))/1000, 'f', -1, 64)
			}
		}
		b = strconv.AppendInt(append(b, ' '), t, 10)
		lines[i] = append([]byte(nil), b...)
		keys[i] = fmt.Appendf(nil, "%s/node%03d", run, host)
		ts[i] = t
	}
	return lines, keys, ts
}

// RunSinkBench encodes cfg.Samples generated records as one flush of one
// partition and measures it.
func RunSinkBench(ctx context.Context, cfg SinkBenchConfig) (SinkBenchResult, error) {
	cfg.Samples = cmp.Or(cfg.Samples, 1_000_000)
	cfg.Tags = cmp.Or(cfg.Tags, 2)
	cfg.Fields = cmp.Or(cfg.Fields, 4)
	cfg.Runs = cmp.Or(cfg.Runs, 4)
	cfg.Flushes = cmp.Or(cfg.Flushes, 1)
	if cfg.Samples < 0 || cfg.Tags < 0 || cfg.Fields < 1 || cfg.Runs < 1 || cfg.Flushes < 1 {
		return SinkBenchResult{}, errors.New("bench sink: samples and tags must not be negative, fields, runs and flushes at least 1")
	}
	lk, err := openSinkLake(ctx, cfg)
	if err != nil {
		return SinkBenchResult{}, err
	}
	defer lk.close()
	lines, keys, ts := sinkBenchLines(cfg)
	recs := make([]sink.Record, len(lines))
	var lineBytes, brokerBytes float64
	for i := range recs {
		recs[i] = sink.Record{Offset: int64(i), Timestamp: time.Unix(0, ts[i]), Key: keys[i], Value: lines[i]}
		lineBytes += float64(len(lines[i]))
		brokerBytes += float64(len(lines[i])+len(keys[i])) + brokerRecordOverhead
	}
	if err := ctx.Err(); err != nil {
		return SinkBenchResult{}, err
	}
	runtime.GC()

	// One goroutine does the work, as one partition of the sink does; the
	// progress watcher only reads the meter.
	type out struct {
		objs []sink.Object
		err  error
	}
	res := make(chan out, 1)
	var m meter
	wctx, stopWatch := context.WithCancel(ctx)
	var watchDone sync.WaitGroup
	if cfg.Progress != nil {
		w := &watch{label: "sink", out: cfg.Progress, interval: cmp.Or(cfg.ProgressEvery, time.Second), m: &m}
		watchDone.Go(func() { w.run(wctx) })
	}
	cpu0, wall0 := selfCPU(), time.Now()
	go func() {
		e := sink.NewEncoder("telemetry", 0, true)
		const step = 4096 // meter updates, not per record
		var stepBytes int64
		var all []sink.Object
		first := 0
		for i := range recs {
			e.Add(&recs[i])
			stepBytes += int64(len(recs[i].Value))
			// The sink lets go of a fetched record once it is buffered;
			// so does the bench, or the encoder would work beside a heap
			// of input the sink never holds.
			recs[i] = sink.Record{}
			if (i+1)%step == 0 || i == len(recs)-1 {
				m.records.Store(int64(i + 1))
				m.bytes.Add(stepBytes)
				stepBytes = 0
			}
			// Flush f ends at record (f+1)*n/Flushes.
			if i+1 != len(recs) && (i+1)*cfg.Flushes/len(recs) == i*cfg.Flushes/len(recs) {
				continue
			}
			objs, err := e.Encode()
			if err == nil && lk != nil {
				err = lk.commit(ctx, objs, int64(first), int64(i))
			}
			if err != nil {
				res <- out{nil, err}
				return
			}
			all = append(all, objs...)
			e.Reset()
			first = i + 1
		}
		res <- out{all, nil}
	}()
	o := <-res
	wall, cpu := time.Since(wall0), selfCPU()-cpu0
	stopWatch()
	watchDone.Wait()
	if o.err != nil {
		return SinkBenchResult{}, fmt.Errorf("bench sink: %w", o.err)
	}
	r := SinkBenchResult{Samples: cfg.Samples, Objects: len(o.objs), WallSeconds: wall.Seconds(), CPUSeconds: cpu.Seconds(), Flushes: cfg.Flushes}
	lk.report(&r)
	var parquetBytes float64
	for _, ob := range o.objs {
		parquetBytes += float64(len(ob.Data))
		if ob.Entry.Kind == "deadletter" {
			r.DeadLetters += ob.Entry.Rows
		}
		if cfg.Dir != "" {
			p := filepath.Join(cfg.Dir, filepath.FromSlash(ob.Key))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return r, fmt.Errorf("bench sink: %w", err)
			}
			if err := os.WriteFile(p, ob.Data, 0o644); err != nil {
				return r, fmt.Errorf("bench sink: %w", err)
			}
		}
	}
	n := float64(cfg.Samples)
	r.SamplesPerSec = n / wall.Seconds()
	if cpu > 0 {
		r.SamplesPerCoreSec = n / cpu.Seconds()
	}
	r.LineBytesPerSample = lineBytes / n
	r.BrokerBytesPerSample = brokerBytes / n
	r.ParquetBytesPerSample = parquetBytes / n
	if parquetBytes > 0 {
		r.CompressionRatio = brokerBytes / parquetBytes
	}
	return r, nil
}
