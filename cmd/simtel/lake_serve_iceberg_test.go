package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

// icebergCols are the columns the readers are compared on: a row's place
// in the topic, then its tags and fields (extra only in later samples).
var icebergCols = []string{"_partition", "_offset", "host", "run", "value", "count", "extra"}

// TestLakeServeIceberg runs the pipeline a site runs: a broker, `simtel
// sink --iceberg-catalog` (SQLite) writing a local lake, and `simtel lake
// serve --listen` with a token file. Readers nobody here wrote then read
// the table telemetry.cpu, and each must see exactly the rows `simtel lake
// query` returns: iceberg-go's REST catalog client (list, load, scan),
// iceberg-js (an Iceberg REST catalog client: namespaces, tables, metadata)
// and icebird (a JavaScript Iceberg reader, over a static file server).
func TestLakeServeIceberg(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the simtel binary")
	}
	dir := t.TempDir()
	lakeDir := filepath.Join(dir, "lake")
	lake, cat := "file://"+lakeDir, "sqlite:"+filepath.Join(dir, "iceberg.db")
	b := inproc.Start(t, brokertest.Topic("telemetry", 2))
	sinkHTTP := testutil.FreePort(t)
	sink := testutil.Start(t, dir, "sink", "--brokers", b.Addr, "--topics", "telemetry", "--lake", lake,
		"--flush-age", "1s", "--iceberg-catalog", cat, "--http-listen", sinkHTTP)
	testutil.WaitPort(t, sinkHTTP, sink)

	// Two flushes: the second adds the field extra (a new column; the
	// first flush's rows read it as null).
	const n = 240
	produceCPU(t, b.Addr, 0, n/2, false)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitLakeRows(t, lake, n/2, icebergCols[:2])
	produceCPU(t, b.Addr, n/2, n, true)
	want := waitLakeRows(t, lake, n, icebergCols)

	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# readers\nreader-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, metricsAddr := testutil.FreePort(t), testutil.FreePort(t)
	serve := testutil.Start(t, dir, "lake", "serve", "--lake", lake, "--cache-dir", t.TempDir(), "--listen", addr,
		"--iceberg-catalog", cat, "--token-file", tokens, "--metrics-listen", metricsAddr)
	testutil.WaitPort(t, addr, serve)
	uri := "http://" + addr

	// iceberg-go's REST client: the table holds what the lake holds once
	// the sink's Iceberg commits (after its catalog commits) are in.
	cl, err := restcat.NewCatalog(ctx, "simtel", uri, restcat.WithOAuthToken("reader-token"))
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cl.ListNamespaces(ctx, nil)
	if err != nil || !slices.ContainsFunc(nss, func(id table.Identifier) bool { return strings.Join(id, ".") == "telemetry" }) {
		t.Fatalf("namespaces %v, %v: want telemetry", nss, err)
	}
	var tables []string
	for id, err := range cl.ListTables(ctx, table.Identifier{"telemetry"}) {
		if err != nil {
			t.Fatal(err)
		}
		tables = append(tables, strings.Join(id, "."))
	}
	if !slices.Contains(tables, "telemetry.cpu") {
		t.Fatalf("tables %v: want telemetry.cpu", tables)
	}
	var got [][]string
	testutil.WaitFor(t, 60*time.Second, "iceberg-go's scan through the REST catalog returns the lake's rows", func() error {
		tbl, err := cl.LoadTable(ctx, table.Identifier{"telemetry", "cpu"})
		if err != nil {
			return err
		}
		at, err := tbl.Scan().ToArrowTable(ctx)
		if err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		defer at.Release()
		got = arrowRows(t, at)
		if len(got) != len(want) {
			return fmt.Errorf("the scan has %d rows, lake query %d", len(got), len(want))
		}
		return nil
	})
	compareRows(t, "iceberg-go", got, want)
	if _, err := restcat.NewCatalog(ctx, "simtel", uri, restcat.WithOAuthToken("wrong")); err == nil {
		t.Error("a wrong token was accepted")
	}
	wantMetrics(t, metricsAddr, `simtel_lake_iceberg_requests_total{code="200",route="loadTable"}`, `simtel_lake_iceberg_auth_failures_total{reason="wrong"} 1`)

	t.Run("iceberg-js and icebird", func(t *testing.T) {
		node, modules := testutil.NodeModules(t, "tests/iceberg-js", "Node.js >= 20", "iceberg-js", "icebird")
		files := httptest.NewServer(http.FileServer(http.Dir(lakeDir)))
		defer files.Close()
		cmd := exec.CommandContext(ctx, node, filepath.Join(modules, "read.mjs"))
		cmd.Dir = modules
		cmd.WaitDelay = 5 * time.Second
		cmd.Env = append(os.Environ(), "SIMTEL_ICEBERG_URI="+uri, "SIMTEL_ICEBERG_TOKEN=reader-token", "SIMTEL_ICEBERG_TABLE=cpu",
			"SIMTEL_LAKE_ROOT="+lake, "SIMTEL_LAKE_HTTP="+files.URL)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node read.mjs: %v\n%s", err, stderr.String())
		}
		var res struct {
			Namespaces, Tables, Schema []string
			FormatVersion              int
			MetadataLocation           string
			AvroRecoded                int
			Rows                       []map[string]any
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		dec.UseNumber()
		if err := dec.Decode(&res); err != nil {
			t.Fatalf("node read.mjs printed %q: %v", out, err)
		}
		t.Logf("iceberg-js: namespaces %v, tables %v, format v%d, %s; icebird: %d rows (%d Avro files recoded)",
			res.Namespaces, res.Tables, res.FormatVersion, res.MetadataLocation, len(res.Rows), res.AvroRecoded)
		if !slices.Contains(res.Namespaces, "telemetry") || !slices.Contains(res.Tables, "telemetry.cpu") {
			t.Errorf("iceberg-js listed namespaces %v and tables %v", res.Namespaces, res.Tables)
		}
		if res.FormatVersion != 2 || !strings.HasPrefix(res.MetadataLocation, lake+"/_iceberg/telemetry/cpu/metadata/") {
			t.Errorf("iceberg-js loaded format v%d at %s", res.FormatVersion, res.MetadataLocation)
		}
		for _, c := range icebergCols {
			if !slices.Contains(res.Schema, c) {
				t.Errorf("the schema iceberg-js loaded lacks %s: %v", c, res.Schema)
			}
		}
		var rows [][]string
		for _, r := range res.Rows {
			var row []string
			for _, c := range icebergCols {
				switch v := r[c].(type) {
				case nil:
					row = append(row, "")
				case json.Number:
					row = append(row, v.String())
				default:
					row = append(row, fmt.Sprint(v))
				}
			}
			rows = append(rows, row)
		}
		compareRows(t, "icebird", rows, want)
	})
}

// produceCPU sends cpu samples from..to-1 to both partitions of telemetry;
// with extra they carry the field extra too.
func produceCPU(t *testing.T, broker string, from, to int, extra bool) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.DefaultProduceTopic("telemetry"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	t0 := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	var recs []*kgo.Record
	for i := from; i < to; i++ {
		l := fmt.Sprintf("cpu,host=n%d,run=r%d value=%d.5,count=%di", i%3, i%2, i, i)
		if extra {
			l += fmt.Sprintf(",extra=%d.25", i)
		}
		l += fmt.Sprintf(" %d", t0.Add(time.Duration(i)*time.Second).UnixNano())
		recs = append(recs, &kgo.Record{Partition: int32(i % 2), Value: []byte(l)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// waitLakeRows waits until `simtel lake query` returns n cpu rows and
// returns them, sorted by partition and offset, as cols.
func waitLakeRows(t *testing.T, lake string, n int, cols []string) [][]string {
	t.Helper()
	var rows [][]string
	testutil.WaitFor(t, 90*time.Second, fmt.Sprintf("%d cpu rows in the lake", n), func() error {
		out, stderr, err := simtelLake(t, "query", "--lake", lake, "--format", "csv",
			"SELECT "+strings.Join(cols, ", ")+" FROM cpu ORDER BY _partition, _offset")
		if err != nil {
			return fmt.Errorf("lake query: %v: %s", err, stderr)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(recs) == 0 {
			return fmt.Errorf("lake query printed %q: %v", out, err)
		}
		rows = recs[1:]
		if len(rows) != n {
			return fmt.Errorf("lake query returns %d rows", len(rows))
		}
		return nil
	})
	return rows
}

// arrowRows are the rows of a scan as icebergCols, sorted by partition
// and offset, in lake query's CSV notation.
func arrowRows(t *testing.T, at arrow.Table) [][]string {
	t.Helper()
	rows := make([][]string, at.NumRows())
	for _, c := range icebergCols {
		idx := at.Schema().FieldIndices(c)
		if len(idx) != 1 {
			t.Fatalf("the scan has no column %s: %v", c, at.Schema())
		}
		i := 0
		for _, ch := range at.Column(idx[0]).Data().Chunks() {
			for j := range ch.Len() {
				rows[i] = append(rows[i], arrowCell(ch, j))
				i++
			}
		}
	}
	slices.SortFunc(rows, func(a, b []string) int {
		pa, _ := strconv.Atoi(a[0])
		pb, _ := strconv.Atoi(b[0])
		oa, _ := strconv.Atoi(a[1])
		ob, _ := strconv.Atoi(b[1])
		if pa != pb {
			return pa - pb
		}
		return oa - ob
	})
	return rows
}

func arrowCell(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return ""
	}
	switch a := a.(type) {
	case *array.Int32:
		return strconv.Itoa(int(a.Value(i)))
	case *array.Int64:
		return strconv.FormatInt(a.Value(i), 10)
	case *array.Float64:
		return strconv.FormatFloat(a.Value(i), 'f', -1, 64)
	case *array.String:
		return a.Value(i)
	}
	return a.ValueStr(i)
}

// compareRows fails t at the first row of got that differs from want.
func compareRows(t *testing.T, reader string, got, want [][]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s read %d rows, simtel lake query %d", reader, len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s row %d is %v, simtel lake query's %v (columns %v)", reader, i, got[i], want[i], icebergCols)
		}
	}
}

// TestLakeServeIcebergFlags: the REST catalog's flags are refused when
// they cannot serve, before anything listens.
func TestLakeServeIcebergFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, "--iceberg-catalog"},
		{[]string{"--iceberg-catalog", "sqlite:x.db"}, "--listen"},
		{[]string{"--listen", "0.0.0.0:0", "--iceberg-catalog", "sqlite:x.db"}, "--token-file"},
		{[]string{"--listen", "127.0.0.1:0", "--iceberg-catalog", "sqlite:x.db", "--tls-cert", "c.pem"}, "--tls-key"},
		{[]string{"--listen", "127.0.0.1:0", "--iceberg-catalog", "sqlite:" + filepath.Join(dir, "none.db")}, "none.db"},
		{[]string{"--listen", "127.0.0.1:0", "--iceberg-catalog", "sqlite:x.db", "--iceberg-prefix", "a/b"}, "prefix"},
		{[]string{"--listen", "127.0.0.1:0", "--iceberg-catalog", "sqlite:x.db", "--token-file", filepath.Join(dir, "none")}, "token file"},
	} {
		_, _, err := runLake(t, append([]string{"serve", "--lake", "file://" + dir}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lake serve %v: %v, want an error naming %s", c.args, err, c.want)
		}
	}
}
