package pgwire

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
	"github.com/simtel/simtel/lake/store"
)

// lakeSource hands out catalog snapshots (loaded at most once per TTL, so a
// burst of queries costs one catalog read while runs stay live) and the
// schema database every connection shares.
type lakeSource struct {
	cfg *Config

	mu      sync.Mutex
	snap    *catalog.Snapshot
	loaded  time.Time // when snap was last known current
	read    time.Time // when snap was read
	listing string    // the catalog files snap was read from
	schema  *query.Engine
	schemaK string
	schemaS *catalog.Snapshot // the snapshot schemaK was computed from
	tables  map[string]bool   // lower-case names of the lake's tables
}

func (l *lakeSource) snapshot(ctx context.Context) (*catalog.Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.snap != nil && time.Since(l.loaded) < l.cfg.CatalogTTL {
		return l.snap, nil
	}
	// Reading the catalog decodes every file in it, which costs as much
	// CPU as a one-run aggregate; listing it costs a few percent of that.
	// So the catalog is read again only when its files changed, or after
	// catalogMaxAge (a store's modification times may be too coarse to
	// tell a rewritten run state of the same size).
	listed, err := l.cfg.Catalog.Store().List(ctx, catalog.Prefix)
	if err != nil {
		return nil, fmt.Errorf("cannot list the catalog: %w", err)
	}
	listing := catalogListing(listed)
	if l.snap != nil && listing == l.listing && time.Since(l.read) < catalogMaxAge {
		l.loaded = time.Now()
		return l.snap, nil
	}
	snap, err := l.cfg.Catalog.Load(ctx)
	if err != nil {
		return nil, err
	}
	l.snap, l.listing = snap, listing
	l.loaded, l.read = time.Now(), time.Now()
	return snap, nil
}

// catalogMaxAge is the longest a catalog snapshot serves queries without
// being read again, even when the catalog's listing looks the same.
const catalogMaxAge = time.Minute

// catalogListing is a digest of the catalog's files: names, sizes and
// modification times.
func catalogListing(objs []store.Object) string {
	h := sha256.New()
	for _, o := range objs {
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", o.Key, o.Size, o.ModTime.UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// schemaDB is an engine whose lake tables are empty tables with the
// columns of the lake's views: catalog queries (psql's \dt, Grafana's table
// and column lists) see them as tables, and statements are described
// without reading data. It is rebuilt when the catalog gains a table or a
// column set.
func (l *lakeSource) schemaDB(ctx context.Context) (*query.Engine, map[string]bool, error) {
	snap, err := l.snapshot(ctx)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	if l.schema != nil && l.schemaS == snap {
		defer l.mu.Unlock()
		return l.schema, l.tables, nil
	}
	l.mu.Unlock()
	// One object per (table, column set) defines every column.
	seen := map[string]bool{}
	var objs []catalog.Object
	for _, o := range query.Select(snap, query.Filter{}) {
		k := o.Kind + "\x00" + o.Measurement + "\x00" + tableOf(o) + "\x00" + strings.Join(o.Columns, ",")
		if len(o.Columns) > 0 && seen[k] {
			continue
		}
		seen[k] = true
		objs = append(objs, o)
	}
	h := sha256.New()
	for _, o := range objs {
		h.Write([]byte(o.Key + "\n"))
	}
	key := hex.EncodeToString(h.Sum(nil))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.schema != nil && l.schemaK == key {
		l.schemaS = snap
		return l.schema, l.tables, nil
	}
	e, err := query.OpenObjects(ctx, objs, l.cfg.Cache, query.Filter{}, query.Options{Logger: l.cfg.Logger, FieldTypes: snap.FieldTypes})
	if err != nil {
		return nil, nil, err
	}
	tables := map[string]bool{}
	for _, v := range e.Views() {
		tables[strings.ToLower(v.Name)] = true
		tmp := query.Ident("simtel_tmp_" + v.Name)
		for _, q := range []string{
			"CREATE TABLE " + tmp + " AS SELECT * FROM " + query.Ident(v.Name) + " LIMIT 0",
			"DROP VIEW " + query.Ident(v.Name),
			"ALTER TABLE " + tmp + " RENAME TO " + query.Ident(v.Name),
		} {
			if err := e.Exec(ctx, q); err != nil {
				e.Close()
				return nil, nil, err
			}
		}
	}
	if err := lockDown(ctx, e, l.cfg, nil); err != nil {
		e.Close()
		return nil, nil, err
	}
	if l.schema != nil {
		old := l.schema
		// Connections may still describe with it for a moment.
		time.AfterFunc(time.Minute, func() { old.Close() })
	}
	l.schema, l.schemaK, l.schemaS, l.tables = e, key, snap, tables
	return e, tables, nil
}

func tableOf(o catalog.Object) string {
	if o.Kind == lake.KindTelemetry {
		return o.Measurement
	}
	return o.Key[:strings.Index(o.Key+"/date=", "/date=")]
}

// compatMacros make the catalog queries of PostgreSQL clients run on
// DuckDB: functions psql and Grafana call that DuckDB lacks.
var compatMacros = []string{
	`CREATE MACRO pg_get_userbyid(id) AS 'simtel'`,
	`CREATE MACRO quote_ident(s) AS CASE WHEN regexp_full_match(s, '[a-z_][a-z0-9_$]*') THEN s ELSE '"' || replace(s, '"', '""') || '"' END`,
	`CREATE MACRO parse_ident(s) AS list_transform(string_split(s, '.'), x -> trim(x, '"'))`,
	`CREATE MACRO array_lower(a, d) AS 1`,
	`CREATE MACRO array_upper(a, d) AS len(a)`,
	`CREATE MACRO pg_encoding_to_char(e) AS 'UTF8'`,
	`CREATE MACRO obj_description(o, c) AS NULL`,
	`CREATE MACRO pg_relation_size(o) AS 0`,
	`CREATE MACRO pg_total_relation_size(o) AS 0`,
	`CREATE MACRO pg_size_pretty(n) AS CAST(n AS VARCHAR) || ' bytes'`,
}

// versionString is what version() says: PostgreSQL's form, which clients
// read the major version from, naming the server and its DuckDB.
func versionString(duck string) string {
	return fmt.Sprintf("PostgreSQL %s on %s-%s, simtel lake over DuckDB %s", serverVersionNumber, runtime.GOARCH, runtime.GOOS, duck)
}

// lockDown makes an engine read-only for clients: the compatibility macros,
// then DuckDB's memory and thread limits, no file access but to the
// engine's own objects (allowed), no extensions, and the configuration
// locked so no statement can change any of it back.
func lockDown(ctx context.Context, e *query.Engine, cfg *Config, allowed []string) error {
	var duck string
	if err := e.DB().QueryRowContext(ctx, "SELECT library_version FROM pragma_version()").Scan(&duck); err != nil {
		return fmt.Errorf("cannot read DuckDB's version: %w", err)
	}
	stmts := append(slices.Clone(compatMacros), "CREATE MACRO version() AS "+query.Literal(versionString(duck)))
	if cfg.MemoryLimitMB > 0 {
		stmts = append(stmts, fmt.Sprintf("SET memory_limit = '%dMB'", cfg.MemoryLimitMB))
	}
	if cfg.Threads > 0 {
		stmts = append(stmts, fmt.Sprintf("SET threads = %d", cfg.Threads))
	}
	if len(allowed) > 0 {
		// A connection runs many statements over the same immutable
		// objects: every statement binds read_parquet over all of them,
		// which reads each footer again unless DuckDB keeps them.
		stmts = append(stmts, "SET parquet_metadata_cache = true", "SET allowed_paths = "+query.ReadList(allowed))
	}
	stmts = append(stmts,
		"SET autoinstall_known_extensions = false",
		"SET autoload_known_extensions = false",
		"SET enable_external_access = false",
		"SET lock_configuration = true")
	for _, q := range stmts {
		if err := e.Exec(ctx, q); err != nil {
			return fmt.Errorf("cannot lock down DuckDB (%s): %w", q, err)
		}
	}
	return nil
}

// selectObjects is what a pruned statement reads: the objects of the
// tables it names (telemetry too when it names a dead-letter table, whose
// rows include the values of conflicting types), and a key naming them,
// so a connection reuses its engine while the key stays the same.
func (l *lakeSource) selectObjects(ctx context.Context, sqlText string, p pruning) ([]catalog.Object, map[string]map[string]string, string, error) {
	snap, err := l.snapshot(ctx)
	if err != nil {
		return nil, nil, "", err
	}
	deadLetters := query.Mentions(sqlText, lake.KindDeadLetter) || strings.Contains(strings.ToLower(sqlText), lake.KindDeadLetter+"_")
	var keep []catalog.Object
	for _, o := range query.Select(snap, query.Filter{Run: p.run, From: p.from, To: p.to}) {
		name := tableOf(o)
		if o.Kind != lake.KindTelemetry {
			name = o.Kind + "_" + query.Unescape(strings.TrimPrefix(name, o.Kind+"/"))
		}
		if query.Mentions(sqlText, name) || o.Kind == lake.KindTelemetry && deadLetters {
			keep = append(keep, o)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", p.run)
	for _, o := range keep {
		h.Write([]byte(o.Key + "\n"))
	}
	return keep, snap.FieldTypes, hex.EncodeToString(h.Sum(nil)), nil
}

// openData opens an engine over objs, locked down to read only them.
func (l *lakeSource) openData(ctx context.Context, objs []catalog.Object, types map[string]map[string]string, run string) (*query.Engine, error) {
	e, err := query.OpenObjects(ctx, objs, l.cfg.Cache, query.Filter{Run: run}, query.Options{Logger: l.cfg.Logger, FieldTypes: types})
	if err != nil {
		return nil, err
	}
	var allowed []string
	for _, v := range e.Views() {
		allowed = append(allowed, v.Paths...)
	}
	if err := lockDown(ctx, e, l.cfg, allowed); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Grafana's query builder finds the schemas on the search path with a
// subquery DuckDB cannot run (set-returning functions in FROM): the tables
// live in DuckDB's main schema, which is what it evaluates to.
var searchPathRE = regexp.MustCompile(`(?is)\(\s*SELECT\s+CASE\s+WHEN\s+trim\(s\[i\]\)\s*=\s*'"\$user"'\s+THEN\s+user\s+ELSE\s+trim\(s\[i\]\)\s+END\s+FROM\s+generate_series\(.*?\)\s+as\s+i\s*,\s*string_to_array\(current_setting\('search_path'\)\s*,\s*','\)\s+s\s*\)`)

var pgCatalogFuncRE = regexp.MustCompile(`(?i)pg_catalog\.(version|pg_get_userbyid|quote_ident|parse_ident|array_lower|array_upper|pg_encoding_to_char|obj_description|pg_relation_size|pg_total_relation_size|pg_size_pretty)\s*\(`)

// psql's \d casts to PostgreSQL's types by their pg_catalog names, and
// to regtype, which DuckDB lacks (the OIDs it names are never set here).
var (
	regtypeRE       = regexp.MustCompile(`(?i)::\s*(?:pg_catalog\.)?regtype(?:\s*::\s*(?:pg_catalog\.)?text)?`)
	pgCatalogTypeRE = regexp.MustCompile(`(?i)::\s*pg_catalog\.(\w+)`)
)

// absentCatalogRE finds PostgreSQL catalog tables DuckDB lacks, of
// things the lake never has (row security policies, extended statistics,
// publications, inheritance, triggers, rules): a query of one has no rows.
var absentCatalogRE = regexp.MustCompile(`(?i)\bpg_catalog\.(pg_policy|pg_statistic_ext|pg_publication|pg_publication_rel|pg_publication_namespace|pg_inherits|pg_trigger|pg_rewrite|pg_partitioned_table|pg_foreign_table|pg_event_trigger)\b`)

// psql's \d <table> reads the table's flags, then its columns, from
// columns of pg_class and pg_attribute DuckDB lacks: both are answered
// with what the lake's tables are (plain tables with no defaults,
// collations, identity or generated columns).
var (
	describeFlagsRE = regexp.MustCompile(`(?is)^SELECT c\.relchecks, c\.relkind, .*\bWHERE c\.oid = '(\d+)';?$`)
	describeColsRE  = regexp.MustCompile(`(?is)^SELECT a\.attname,\s*pg_catalog\.format_type\(a\.atttypid, a\.atttypmod\),.*\bFROM pg_catalog\.pg_attribute a\s+WHERE a\.attrelid = '(\d+)' AND a\.attnum > 0 AND NOT a\.attisdropped\s+ORDER BY a\.attnum;?$`)
)

const (
	describeFlags = `SELECT 0 AS relchecks, 'r' AS relkind, false AS relhasindex, false AS relhasrules, false AS relhastriggers, false AS relrowsecurity, false AS relforcerowsecurity, false AS relhasoids, false AS relispartition, '' AS reloptions, 0 AS reltablespace, '' AS reloftype, 'p' AS relpersistence, 'd' AS relreplident, 'heap' AS amname FROM pg_catalog.pg_class WHERE oid = %s`
	describeCols  = `SELECT attname, format_type(atttypid, atttypmod) AS format_type, NULL::VARCHAR AS pg_get_expr, attnotnull, NULL::VARCHAR AS attcollation, '' AS attidentity, '' AS attgenerated FROM pg_catalog.pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped ORDER BY attnum`
)

// rewrite adapts the SQL of PostgreSQL clients' catalog queries to DuckDB.
func rewrite(q string) string {
	if absentCatalogRE.MatchString(q) {
		return "SELECT NULL AS none WHERE false"
	}
	if m := describeFlagsRE.FindStringSubmatch(q); m != nil {
		return fmt.Sprintf(describeFlags, m[1])
	}
	if m := describeColsRE.FindStringSubmatch(q); m != nil {
		return fmt.Sprintf(describeCols, m[1])
	}
	q = searchPathRE.ReplaceAllString(q, "(SELECT 'main')")
	q = pgCatalogFuncRE.ReplaceAllString(q, "$1(")
	q = strings.ReplaceAll(q, "OPERATOR(pg_catalog.~)", "~")
	q = strings.ReplaceAll(q, "COLLATE pg_catalog.default", "")
	q = regtypeRE.ReplaceAllString(q, "::VARCHAR")
	q = pgCatalogTypeRE.ReplaceAllString(q, "::$1")
	return q
}
