package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/pgwire"
	"github.com/simtel/simtel/lake/store"
)

// LakePGConfig sizes the benchmark of `simtel lake serve --pg-listen`:
// clients of the PostgreSQL wire protocol each running one run's
// aggregate over the bench lake of "Lake queries", again and again.
type LakePGConfig struct {
	// Lake is the bench lake, built or reused as RunLakeQueryBench does.
	Lake LakeQueryConfig
	// Clients are the numbers of concurrent clients to measure (default
	// 1, 8, 32).
	Clients []int
	// Duration of each measurement (default 10s).
	Duration time.Duration
	// Threads is DuckDB's thread count per connection (default: the
	// server's, GOMAXPROCS, as `simtel lake serve` has).
	Threads int
	// Progress receives a line per level; nil: quiet.
	Progress io.Writer
}

// LakePGLevel is one number of clients' figures.
type LakePGLevel struct {
	Clients int     `json:"clients"`
	Queries int64   `json:"queries"`
	QPS     float64 `json:"qps"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	// RSSPerConnMiB is the process's resident memory growth after the
	// clients connected and ran their first query, per client: the
	// connection's DuckDB engine over its run's objects.
	RSSPerConnMiB float64 `json:"rss_per_conn_mib"`
}

// LakePGResult is what the benchmark measured.
type LakePGResult struct {
	Samples int64  `json:"samples"`
	Query   string `json:"query"`
	// LakeQueryWarmMs is the same aggregate through lake/query in the same
	// run (RunLakeQueryBench's warm figure): what one client's p50 compares
	// with.
	LakeQueryWarmMs float64       `json:"lake_query_warm_ms"`
	Levels          []LakePGLevel `json:"levels"`
}

// lakePGQuery is the statement every client runs, client i for run
// r<i mod runs>: the catalog prunes it to that run's objects.
const lakePGQuery = "SELECT count(*), avg(usage_user), max(usage_user) FROM cpu WHERE run = $1"

// RunLakePGBench serves the bench lake over the PostgreSQL protocol
// in-process and measures queries per second, latency and memory per
// connection at each client count.
func RunLakePGBench(ctx context.Context, cfg LakePGConfig) (LakePGResult, error) {
	res := LakePGResult{Query: lakePGQuery}
	if len(cfg.Clients) == 0 {
		cfg.Clients = []int{1, 8, 32}
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	lq, err := RunLakeQueryBench(ctx, cfg.Lake)
	if err != nil {
		return res, err
	}
	res.Samples, res.LakeQueryWarmMs = lq.Samples, lq.WarmSeconds*1000
	lcfg := cfg.Lake
	if err := lcfg.defaults(); err != nil {
		return res, err
	}
	st, err := store.Open(ctx, lcfg.Dir, store.Options{})
	if err != nil {
		return res, err
	}
	srv := pgwire.New(pgwire.Config{Catalog: catalog.New(st), Cache: store.NewCache(st, filepath.Join(lcfg.Dir, ".cache"), 0),
		Threads: cfg.Threads, MemoryLimitMB: 512})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go srv.Serve(sctx, ln)
	dsn := "postgres://bench@" + ln.Addr().String() + "/lake?sslmode=disable"
	for _, n := range cfg.Clients {
		lv, err := lakePGLevel(ctx, dsn, n, lcfg.Runs, cfg.Duration)
		if err != nil {
			return res, err
		}
		fmt.Fprintf(cfg.Progress, "lake pg: %d clients: %d queries, %.1f/s, p50 %.1f ms (%.2f× lake query's %.1f ms), p99 %.1f ms, %.1f MiB per connection\n",
			lv.Clients, lv.Queries, lv.QPS, lv.P50ms, lv.P50ms/res.LakeQueryWarmMs, res.LakeQueryWarmMs, lv.P99ms, lv.RSSPerConnMiB)
		res.Levels = append(res.Levels, lv)
	}
	return res, nil
}

func lakePGLevel(ctx context.Context, dsn string, clients, runs int, d time.Duration) (LakePGLevel, error) {
	lv := LakePGLevel{Clients: clients}
	rss0 := rssBytes()
	conns := make([]*pgx.Conn, clients)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(ctx)
			}
		}
	}()
	query := func(i int, c *pgx.Conn) error {
		var n int64
		var avg, max float64
		if err := c.QueryRow(ctx, lakePGQuery, "r"+strconv.Itoa(i%runs)).Scan(&n, &avg, &max); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("run r%d has no cpu rows", i%runs)
		}
		return nil
	}
	for i := range conns {
		c, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return lv, err
		}
		conns[i] = c
		if err := query(i, c); err != nil {
			return lv, err
		}
	}
	lv.RSSPerConnMiB = float64(rssBytes()-rss0) / float64(clients) / (1 << 20)
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i, c := range conns {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(end) {
				t := time.Now()
				if err := query(i, c); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if firstErr != nil {
		return lv, firstErr
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	lv.Queries = int64(len(lat))
	lv.QPS = float64(len(lat)) / elapsed.Seconds()
	if len(lat) > 0 {
		lv.P50ms = float64(lat[len(lat)/2]) / 1e6
		lv.P99ms = float64(lat[len(lat)*99/100]) / 1e6
	}
	return lv, nil
}

// rssBytes is the process's resident set size (Linux), 0 elsewhere.
func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	m, err := parseProcStatus(b)
	if err != nil {
		return 0
	}
	return m.RSS
}
