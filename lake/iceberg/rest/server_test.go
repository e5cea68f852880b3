package rest_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	icat "github.com/apache/iceberg-go/catalog"
	restcat "github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"

	lakeiceberg "github.com/simtel/simtel/lake/iceberg"
	"github.com/simtel/simtel/lake/iceberg/rest"
	"github.com/simtel/simtel/lake/store"
)

// tokens is a fixed token set.
type tokens []string

func (t tokens) Has(s string) bool { return slices.Contains(t, s) }

// catalog is a SQLite catalog with namespaces telemetry (tables cpu, mem,
// net) and ops.daily (no tables), opened read-only as lake serve opens it.
func catalog(t *testing.T) icat.Catalog {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	st, err := store.Open(ctx, "file://"+filepath.Join(dir, "lake"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := lakeiceberg.Options{Catalog: "sqlite:" + filepath.Join(dir, "iceberg.db"), Store: st}
	w, err := lakeiceberg.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sch := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "time", Type: iceberg.PrimitiveTypes.TimestampTz, Required: true})
	for _, n := range []string{"net", "cpu", "mem"} {
		if _, err := w.Catalog().CreateTable(ctx, lakeiceberg.Ident(n), sch, icat.WithLocation("file://"+filepath.Join(dir, "lake", "_iceberg", n))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Catalog().CreateNamespace(ctx, table.Identifier{"ops", "daily"}, iceberg.Properties{"owner": "ops"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	opts.ReadOnly = true
	r, err := lakeiceberg.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.Catalog()
}

func serve(t *testing.T, cfg rest.Config) *httptest.Server {
	t.Helper()
	s, err := rest.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// TestIcebergGoClient: iceberg-go's own REST client lists, loads and checks
// through the server, with a prefix and a token.
func TestIcebergGoClient(t *testing.T) {
	ctx := t.Context()
	m := rest.NewMetrics()
	hs := serve(t, rest.Config{Catalog: catalog(t), Prefix: "lake", Tokens: tokens{"s3cret"}, Metrics: m,
		TableConfig: iceberg.Properties{"s3.endpoint": "http://127.0.0.1:9000"}})
	cl, err := restcat.NewCatalog(ctx, "simtel", hs.URL, restcat.WithOAuthToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	nss, err := cl.ListNamespaces(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(joinAll(nss), " "); got != "ops telemetry" {
		t.Errorf("namespaces %q, want the top level: ops telemetry", got)
	}
	nss, err = cl.ListNamespaces(ctx, table.Identifier{"ops"})
	if err != nil || len(nss) != 1 || strings.Join(nss[0], ".") != "ops.daily" {
		t.Errorf("namespaces under ops: %v, %v; want ops.daily", nss, err)
	}
	props, err := cl.LoadNamespaceProperties(ctx, table.Identifier{"ops", "daily"})
	if err != nil || props["owner"] != "ops" {
		t.Errorf("ops.daily properties %v, %v", props, err)
	}
	var names []string
	for id, err := range cl.ListTables(ctx, table.Identifier{"telemetry"}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, strings.Join(id, "."))
	}
	if got := strings.Join(names, " "); got != "telemetry.cpu telemetry.mem telemetry.net" {
		t.Errorf("tables %q", got)
	}
	tbl, err := cl.LoadTable(ctx, table.Identifier{"telemetry", "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tbl.MetadataLocation(), "file://") || tbl.Schema().Field(0).Name != "time" {
		t.Errorf("loaded %s with schema %v", tbl.MetadataLocation(), tbl.Schema())
	}
	if ok, err := cl.CheckTableExists(ctx, table.Identifier{"telemetry", "disk"}); ok || err != nil {
		t.Errorf("telemetry.disk exists: %v, %v", ok, err)
	}
	if ok, err := cl.CheckNamespaceExists(ctx, table.Identifier{"telemetry"}); !ok || err != nil {
		t.Errorf("telemetry exists: %v, %v", ok, err)
	}
	if _, err := cl.LoadTable(ctx, table.Identifier{"telemetry", "disk"}); !errors.Is(err, icat.ErrNoSuchTable) {
		t.Errorf("loading a missing table: %v, want ErrNoSuchTable", err)
	}
	// The client itself refuses what /v1/config does not announce.
	if err := cl.CreateNamespace(ctx, table.Identifier{"x"}, nil); err == nil {
		t.Error("a namespace was created through a read-only catalog")
	}
	if got := value(m, "simtel_lake_iceberg_requests_total", map[string]string{"route": "loadTable", "code": "200"}); got != 1 {
		t.Errorf("loadTable 200 counted %v times, want 1", got)
	}

	if _, err := restcat.NewCatalog(ctx, "simtel", hs.URL, restcat.WithOAuthToken("wrong")); !errors.Is(err, restcat.ErrUnauthorized) {
		t.Errorf("a wrong token: %v, want ErrUnauthorized", err)
	}
	if _, err := restcat.NewCatalog(ctx, "simtel", hs.URL); !errors.Is(err, restcat.ErrUnauthorized) {
		t.Errorf("no token: %v, want ErrUnauthorized", err)
	}
	if got := value(m, "simtel_lake_iceberg_auth_failures_total", map[string]string{"reason": "wrong"}); got != 1 {
		t.Errorf("wrong-token failures %v, want 1", got)
	}
}

// value is the value of one series of m, or -1 when m has none.
func value(m *rest.Metrics, name string, labels map[string]string) float64 {
	reg := prometheus.NewRegistry()
	m.Register(reg)
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return mt.GetCounter().GetValue()
		}
	}
	return -1
}

func joinAll(ids []table.Identifier) []string {
	var out []string
	for _, id := range ids {
		out = append(out, strings.Join(id, "."))
	}
	return out
}

// TestWire checks answers byte by byte as a client without iceberg-go
// sees them: the error model, 405 on writes, pages, HEAD and ETag.
func TestWire(t *testing.T) {
	hs := serve(t, rest.Config{Catalog: catalog(t)})
	do := func(method, path string, hdr ...string) (int, http.Header, map[string]any) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), method, hs.URL+path, strings.NewReader("{}"))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if len(b) > 0 {
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s %s: %d %q is not JSON", method, path, resp.StatusCode, b)
			}
		}
		return resp.StatusCode, resp.Header, v
	}
	errOf := func(v map[string]any) (string, float64) {
		e, _ := v["error"].(map[string]any)
		typ, _ := e["type"].(string)
		code, _ := e["code"].(float64)
		if msg, _ := e["message"].(string); msg == "" {
			t.Errorf("error without a message: %v", v)
		}
		return typ, code
	}

	for _, c := range []struct {
		method, path string
		code         int
		typ          string
	}{
		{"GET", "/v1/namespaces/nope", 404, "NoSuchNamespaceException"},
		{"GET", "/v1/namespaces/nope/tables", 404, "NoSuchNamespaceException"},
		{"GET", "/v1/namespaces?parent=nope", 404, "NoSuchNamespaceException"},
		{"GET", "/v1/namespaces/telemetry/tables/disk", 404, "NoSuchTableException"},
		{"POST", "/v1/namespaces", 405, "MethodNotAllowedException"},
		{"DELETE", "/v1/namespaces/telemetry/tables/cpu", 405, "MethodNotAllowedException"},
		{"POST", "/v1/tables/rename", 405, "MethodNotAllowedException"},
		{"GET", "/v1/lake/namespaces", 404, "NotFoundException"},
		{"GET", "/v1/namespaces?pageSize=0", 400, "BadRequestException"},
	} {
		code, hdr, v := do(c.method, c.path)
		typ, bodyCode := errOf(v)
		if code != c.code || typ != c.typ || int(bodyCode) != c.code {
			t.Errorf("%s %s: %d %s (body code %v), want %d %s", c.method, c.path, code, typ, bodyCode, c.code, c.typ)
		}
		if code == 405 && hdr.Get("Allow") == "" && c.path != "/v1/tables/rename" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	if code, _, _ := do("HEAD", "/v1/namespaces/telemetry/tables/cpu"); code != 204 {
		t.Errorf("HEAD of an existing table: %d, want 204", code)
	}
	if code, _, _ := do("HEAD", "/v1/namespaces/telemetry/tables/disk"); code != 404 {
		t.Errorf("HEAD of a missing table: %d, want 404", code)
	}
	if code, _, _ := do("HEAD", "/v1/namespaces/ops%1Fdaily"); code != 204 {
		t.Errorf("HEAD of ops.daily: %d, want 204", code)
	}

	// Two pages of two tables and one of one.
	var got []string
	tok := ""
	for range 3 {
		code, _, v := do("GET", "/v1/namespaces/telemetry/tables?pageSize=2&pageToken="+tok)
		if code != 200 {
			t.Fatalf("list tables: %d %v", code, v)
		}
		for _, id := range v["identifiers"].([]any) {
			got = append(got, id.(map[string]any)["name"].(string))
		}
		tok, _ = v["next-page-token"].(string)
		if tok == "" {
			break
		}
	}
	if strings.Join(got, ",") != "cpu,mem,net" || tok != "" {
		t.Errorf("paged tables %v (last token %q), want cpu,mem,net", got, tok)
	}

	code, hdr, v := do("GET", "/v1/namespaces/telemetry/tables/cpu")
	if code != 200 || v["metadata-location"] == nil || v["metadata"].(map[string]any)["format-version"] == nil {
		t.Fatalf("load table: %d %v", code, v)
	}
	if v["config"] == nil {
		t.Error("load table: no config object")
	}
	if code, _, _ := do("GET", "/v1/namespaces/telemetry/tables/cpu", "If-None-Match", hdr.Get("ETag")); code != 304 {
		t.Errorf("load table with its ETag: %d, want 304", code)
	}
	code, _, v = do("GET", "/v1/config")
	if code != 200 || len(v["endpoints"].([]any)) == 0 {
		t.Errorf("config: %d %v", code, v)
	}
	if code, _, v := do("POST", "/v1/oauth/tokens"); code != 400 || v["error"] != "unsupported_grant_type" {
		t.Errorf("oauth tokens: %d %v", code, v)
	}
}

func TestConfigValidate(t *testing.T) {
	cat := catalog(t)
	for _, p := range []string{"a/b", "config", "..", "sp ace"} {
		if _, err := rest.New(rest.Config{Catalog: cat, Prefix: p}); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if _, err := rest.New(rest.Config{}); err == nil {
		t.Error("no catalog accepted")
	}
}
