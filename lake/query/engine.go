// Package query runs SQL over the lake with DuckDB. Open asks the catalog
// which objects match a Filter (the bucket is never listed), makes each one
// a local file through the store's download cache (DuckDB's httpfs is not
// used: it cannot be installed offline), and creates one view per
// measurement, plus raw_<topic> and deadletter_<topic> views, each over
// read_parquet([...], union_by_name=true, hive_partitioning=true) so objects
// written with different columns read as one table.
package query

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver
	"golang.org/x/sync/errgroup"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/schema"
	"github.com/simtel/simtel/lake/store"
)

// Filter selects the objects a query reads. Zero values select everything.
type Filter struct {
	Run   string    // only this run's telemetry (raw and dead-letter objects have no run)
	Topic string    // only objects written from this topic
	From  time.Time // rows at or after From
	To    time.Time // rows before To
	// Measurements restricts telemetry to these measurements; empty: all.
	Measurements []string
	// NoRaw leaves out raw and dead-letter objects (replay and compaction
	// read telemetry only).
	NoRaw bool
	// SQL, when set, is the statement the engine is for: only the tables
	// it names are defined, so objects of other measurements are not
	// fetched.
	SQL string
}

// Mentions reports whether sql names the table: its name (case-insensitive,
// as DuckDB compares identifiers) appears with no identifier character
// right before or after it. A false positive costs a few fetched objects;
// a table that is used is always named.
func Mentions(sql, table string) bool {
	s, t := strings.ToLower(sql), strings.ToLower(table)
	if t == "" {
		return false
	}
	ident := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c >= 0x80
	}
	for i := 0; ; {
		j := strings.Index(s[i:], t)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(t)
		if (j == 0 || !ident(s[j-1])) && (end == len(s) || !ident(s[end])) {
			return true
		}
		i = j + 1
	}
}

// Fetcher gives a local file path for an object key; *store.Cache is one.
type Fetcher interface {
	Path(ctx context.Context, key string) (string, error)
}

// Options tune an Engine. The zero value is usable.
type Options struct {
	// Logger receives debug messages; nil discards them.
	Logger *slog.Logger
	// Progress, when not nil, receives a progress line while objects are
	// fetched into the cache, once fetching has taken over a second.
	Progress io.Writer
	// Fetchers is how many objects are fetched at once (default 8).
	Fetchers int
	// NoHivePartitioning leaves out the run and date columns DuckDB derives
	// from object paths (which win over a file's own run column), so the
	// files' own columns are read as written: replay and compaction need
	// that. Such an engine does not unify a column's types either (see
	// FieldTypes): every value is read as its object holds it.
	NoHivePartitioning bool
	// FieldTypes are the fixed field types by measurement then field
	// (catalog.Snapshot.FieldTypes; Open fills it in). A telemetry column
	// whose objects disagree on its type is read in this type, or, for a
	// field without one, in the type of its oldest object; see
	// View.Conflicts.
	FieldTypes map[string]map[string]string
}

// View is one table the engine defines.
type View struct {
	Name        string // the SQL name: a measurement, raw_<topic> or deadletter_<topic>
	Kind        string // lake.KindTelemetry, KindRaw or KindDeadLetter
	Measurement string // for telemetry views
	Topic       string // for raw and dead-letter views
	Objects     []catalog.Object
	Paths       []string // local files of Objects, in the same order
	Columns     []Column
	// Conflicts lists the columns whose objects hold them in more than one
	// type (a lake written before field types were fixed): the view reads
	// them in one type and shows NULL where an object has another.
	Conflicts []TypeConflict
	// TypeConflictLetters, in a dead-letter view, is how many (object,
	// column) pairs of telemetry views it also reads: the values those
	// views show as NULL (see TypeConflict), one row per value.
	TypeConflictLetters int
}

// Column is one column of a view, with DuckDB's type name.
type Column struct {
	Name string
	Type string
}

// Engine is an in-memory DuckDB database with views over lake objects.
// It is safe for concurrent use, as *sql.DB is.
type Engine struct {
	db    *sql.DB
	views []View
	keyOf map[string]string // local path → object key, for error messages
	bytes int64
	tmp   string // DuckDB's spill directory, removed by Close
}

// Open loads the catalog, selects the objects matching f and opens an
// engine over them.
func Open(ctx context.Context, st store.Store, cat *catalog.Catalog, cache Fetcher, f Filter, opts ...Options) (*Engine, error) {
	snap, err := cat.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("cannot load the catalog of %s: %w", st, err)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.FieldTypes == nil {
		o.FieldTypes = snap.FieldTypes
	}
	return OpenObjects(ctx, Select(snap, f), cache, f, o)
}

// Select returns the catalog objects a filter reads, sorted by key.
func Select(snap *catalog.Snapshot, f Filter) []catalog.Object {
	var out []catalog.Object
	kinds := []string{lake.KindTelemetry}
	if !f.NoRaw && f.Run == "" {
		kinds = append(kinds, lake.KindRaw, lake.KindDeadLetter)
	}
	for _, kind := range kinds {
		cf := catalog.Filter{Kind: kind, Topic: f.Topic, From: f.From, To: f.To}
		if kind == lake.KindTelemetry {
			cf.Run = f.Run
		}
		for _, o := range snap.Objects(cf) {
			if kind == lake.KindTelemetry && len(f.Measurements) > 0 && !slices.Contains(f.Measurements, o.Measurement) {
				continue
			}
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b catalog.Object) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// OpenObjects opens an engine over the given objects: it fetches them
// through cache and defines the views. f's time range is applied to the
// rows of every view.
func OpenObjects(ctx context.Context, objs []catalog.Object, cache Fetcher, f Filter, o Options) (*Engine, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Values a telemetry view hides because a legacy object holds their
	// column in another type are dead letters of the object's topic; only
	// engines with dead letters and unified types show them.
	conflictLetters := !f.NoRaw && f.Run == "" && !o.NoHivePartitioning
	if f.SQL != "" {
		var keep []catalog.Object
		for _, obj := range objs {
			name, _ := viewFor(obj)
			// A query of deadletter_<topic> reads the topic's telemetry
			// too: which of its values are dead letters depends on the
			// types of every object of their measurement.
			if Mentions(f.SQL, name) || conflictLetters && obj.Kind == lake.KindTelemetry &&
				Mentions(f.SQL, lake.KindDeadLetter+"_"+topicOfTelemetry(obj.Key)) {
				keep = append(keep, obj)
			}
		}
		objs = keep
	}
	paths, err := fetchAll(ctx, objs, cache, o)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, fmt.Errorf("cannot start DuckDB: %w", err)
	}
	e := &Engine{db: db, keyOf: map[string]string{}}
	// Sorting and merging spill to disk beyond DuckDB's memory limit; the
	// default spill directory is ./.tmp, which must not appear wherever the
	// user happens to run the command.
	tmp, err := os.MkdirTemp("", "simtel-duckdb-")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot create DuckDB's spill directory: %w", err)
	}
	e.tmp = tmp
	if _, err := db.ExecContext(ctx, "SET GLOBAL temp_directory = "+Literal(tmp)); err != nil {
		e.Close()
		return nil, fmt.Errorf("cannot set DuckDB's spill directory: %w", err)
	}
	for i, obj := range objs {
		e.keyOf[paths[i]] = obj.Key
		e.bytes += obj.Bytes
	}
	byView := map[string]*View{}
	var order []string
	for _, obj := range objs {
		name, v := viewFor(obj)
		if name == "" {
			log.Warn("object of unknown kind skipped", "key", obj.Key, "kind", obj.Kind)
			continue
		}
		cur, ok := byView[name]
		if !ok {
			cur = &v
			byView[name] = cur
			order = append(order, name)
		} else if cur.Kind != v.Kind {
			e.Close()
			return nil, fmt.Errorf("two kinds of objects want the view name %q (%s and %s): rename the measurement or filter with --topic", name, cur.Kind, v.Kind)
		}
		cur.Objects = append(cur.Objects, obj)
	}
	pathOf := map[string]string{}
	for i, obj := range objs {
		pathOf[obj.Key] = paths[i]
	}
	slices.Sort(order)
	// Telemetry views first: the values they hide go to the dead-letter
	// views, which may not exist yet.
	froms := map[string]string{}
	hiddenBy := map[string][]hiddenValues{} // dead-letter view → values
	for _, name := range order {
		v := byView[name]
		var ps []string
		for _, obj := range v.Objects {
			ps = append(ps, pathOf[obj.Key])
		}
		v.Paths = ps
		froms[name] = ReadParquet(ps, !o.NoHivePartitioning)
		if v.Kind != lake.KindTelemetry || o.NoHivePartitioning {
			continue
		}
		from, conflicts, hidden, err := typedSource(ctx, db, v, o.FieldTypes[v.Measurement], true)
		if err != nil {
			e.Close()
			return nil, e.explain(fmt.Errorf("cannot read the column types of %s", Ident(name)), err)
		}
		froms[name], v.Conflicts = from, conflicts
		for _, c := range v.Conflicts {
			log.Warn("column holds several types; values of other types read as NULL and are dead letters",
				"view", name, "column", c.Column, "type", c.Type, "objects_with_other_types", len(c.Hidden))
		}
		if !conflictLetters {
			continue
		}
		for _, h := range hidden {
			dl := lake.KindDeadLetter + "_" + topicOfTelemetry(h.key)
			hiddenBy[dl] = append(hiddenBy[dl], h)
		}
	}
	for dl, hs := range hiddenBy {
		cur, ok := byView[dl]
		if !ok {
			cur = &View{Name: dl, Kind: lake.KindDeadLetter, Topic: strings.TrimPrefix(dl, lake.KindDeadLetter+"_")}
			byView[dl] = cur
			order = append(order, dl)
		} else if cur.Kind != lake.KindDeadLetter {
			e.Close()
			return nil, fmt.Errorf("two kinds of objects want the view name %q (%s and %s): rename the measurement or filter with --topic", dl, cur.Kind, lake.KindDeadLetter)
		}
		parts := make([]string, 0, len(hs)+1)
		if len(cur.Paths) > 0 {
			parts = append(parts, "(SELECT * FROM "+froms[dl]+")")
		}
		for _, h := range hs {
			parts = append(parts, deadLetterSelect(h, true))
		}
		froms[dl] = "(" + strings.Join(parts, " UNION ALL BY NAME ") + ")"
		cur.TypeConflictLetters = len(hs)
	}
	slices.Sort(order)
	for _, name := range order {
		v := byView[name]
		timeCol := "time"
		if v.Kind != lake.KindTelemetry {
			timeCol = "timestamp"
		}
		ps, from := v.Paths, froms[name]
		q := "CREATE VIEW " + Ident(name) + " AS SELECT * FROM " + from + timeWhere(timeCol, f.From, f.To)
		if _, err := db.ExecContext(ctx, q); err != nil {
			e.Close()
			return nil, e.explain(fmt.Errorf("cannot define view %s over %d objects", Ident(name), len(ps)), err)
		}
		if ns, table, ok := Namespaced(name); ok {
			// The table also answers to its name in the namespace's
			// schema: rollup_1m.cpu as well as "rollup_1m.cpu".
			if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+Ident(ns)+"; CREATE VIEW "+Ident(ns)+"."+Ident(table)+" AS SELECT * FROM main."+Ident(name)); err != nil {
				e.Close()
				return nil, e.explain(fmt.Errorf("cannot define view %s.%s", Ident(ns), Ident(table)), err)
			}
		}
		cols, err := describe(ctx, db, name)
		if err != nil {
			e.Close()
			return nil, e.explain(fmt.Errorf("cannot read the columns of view %s", Ident(name)), err)
		}
		v.Columns = cols
		e.views = append(e.views, *v)
	}
	log.Debug("lake query engine ready", "objects", len(objs), "views", len(e.views), "bytes", e.bytes)
	return e, nil
}

func viewFor(o catalog.Object) (string, View) {
	switch o.Kind {
	case lake.KindTelemetry:
		return o.Measurement, View{Name: o.Measurement, Kind: o.Kind, Measurement: o.Measurement}
	case lake.KindRaw, lake.KindDeadLetter:
		t := topicOf(o.Key)
		n := o.Kind + "_" + t
		return n, View{Name: n, Kind: o.Kind, Topic: t}
	}
	return "", View{}
}

// topicOf reads the topic from a raw or dead-letter key
// (<kind>/<escaped topic>/date=…/…), undoing the path escaping.
func topicOf(key string) string {
	parts := strings.Split(key, "/")
	if len(parts) < 2 {
		return ""
	}
	return Unescape(parts[1])
}

// Unescape undoes lake.EscapeSegment.
func Unescape(s string) string {
	if s == lake.NoValue {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+3], "%02X", &c); err == nil {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ReadParquet is the read_parquet table function call over local paths.
func ReadParquet(paths []string, hive bool) string {
	var b strings.Builder
	b.WriteString("read_parquet(" + ReadList(paths) + ", union_by_name=true")
	if hive {
		b.WriteString(", hive_partitioning=true")
	} else {
		b.WriteString(", hive_partitioning=false")
	}
	b.WriteString(")")
	return b.String()
}

func timeWhere(col string, from, to time.Time) string {
	var conds []string
	if !from.IsZero() {
		conds = append(conds, Ident(col)+" >= "+timeLiteral(from))
	}
	if !to.IsZero() {
		conds = append(conds, Ident(col)+" < "+timeLiteral(to))
	}
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

func timeLiteral(t time.Time) string {
	return "TIMESTAMPTZ " + Literal(t.UTC().Format("2006-01-02 15:04:05.999999")+"+00")
}

// Namespaces are the lake's table namespaces besides the measurements
// of the telemetry topic: a measurement named <namespace>.<name> (the
// rollup worker writes rollup_1m.cpu) is also the table <name> of the
// schema <namespace>.
var Namespaces = []string{"rollup_10s", "rollup_1m", "rollup_1h", "summary"}

// Namespaced splits a view name <namespace>.<table> whose namespace is
// one of Namespaces.
func Namespaced(name string) (ns, table string, ok bool) {
	ns, table, ok = strings.Cut(name, ".")
	if !ok || table == "" || !slices.Contains(Namespaces, ns) {
		return "", "", false
	}
	return ns, table, true
}

// Ident quotes a SQL identifier.
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Literal quotes a SQL string literal.
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func describe(ctx context.Context, db *sql.DB, view string) ([]Column, error) {
	rows, err := db.QueryContext(ctx, "SELECT column_name, column_type FROM (DESCRIBE "+Ident(view)+")")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []Column
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

// fetchAll makes every object a local file, several at a time, printing
// progress to o.Progress once it has taken over a second.
func fetchAll(ctx context.Context, objs []catalog.Object, cache Fetcher, o Options) ([]string, error) {
	paths := make([]string, len(objs))
	if len(objs) == 0 {
		return paths, nil
	}
	var total int64
	for _, obj := range objs {
		total += obj.Bytes
	}
	n := o.Fetchers
	if n <= 0 {
		n = 8
	}
	var done, doneBytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(n)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	if o.Progress != nil {
		wg.Go(func() {
			start := time.Now()
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			shown := false
			for {
				select {
				case <-stop:
					if shown {
						fmt.Fprintf(o.Progress, "\rfetched %d/%d objects (%s of %s)          \n", done.Load(), len(objs), FormatBytes(doneBytes.Load()), FormatBytes(total))
					}
					return
				case <-tick.C:
					if time.Since(start) < time.Second {
						continue
					}
					shown = true
					fmt.Fprintf(o.Progress, "\rfetching objects into the cache: %d/%d (%s of %s)", done.Load(), len(objs), FormatBytes(doneBytes.Load()), FormatBytes(total))
				}
			}
		})
	}
	for i, obj := range objs {
		g.Go(func() error {
			p, err := cache.Path(gctx, obj.Key)
			if err != nil {
				if errors.Is(err, store.ErrNotFound) {
					return fmt.Errorf("object %s is in the catalog but missing from the lake (deleted by hand, or a compaction is in progress: rerun the command): %w", obj.Key, err)
				}
				return fmt.Errorf("cannot fetch object %s: %w", obj.Key, err)
			}
			paths[i] = p
			done.Add(1)
			doneBytes.Add(obj.Bytes)
			return nil
		})
	}
	err := g.Wait()
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	// A cache smaller than the query's objects evicts early ones while
	// later ones download; DuckDB would then fail on a missing file.
	for i, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("object %s left the local cache while the query's other objects were fetched: the query reads %s, more than the cache may hold; raise --cache-max-mb or narrow the query with --run/--from/--to: %w",
				objs[i].Key, FormatBytes(total), err)
		}
	}
	return paths, nil
}

// FormatBytes prints a byte count with a binary unit.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// Views are the engine's tables, sorted by name.
func (e *Engine) Views() []View { return e.views }

// Bytes is the total size of the objects the engine reads.
func (e *Engine) Bytes() int64 { return e.bytes }

// Objects is how many objects the engine reads.
func (e *Engine) Objects() int { return len(e.keyOf) }

// DB is the underlying database, for callers that need a connection.
func (e *Engine) DB() *sql.DB { return e.db }

// Query runs sql. A failure carries DuckDB's message; when DuckDB names an
// object's local file the error names the object's key.
func (e *Engine) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	rows, err := e.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, e.explain(errors.New("query failed"), err)
	}
	return rows, nil
}

// Exec runs a statement that returns no rows.
func (e *Engine) Exec(ctx context.Context, q string, args ...any) error {
	if _, err := e.db.ExecContext(ctx, q, args...); err != nil {
		return e.explain(errors.New("statement failed"), err)
	}
	return nil
}

// Explain turns an error from reading rows of a query into one that names
// the lake object involved; use it on rows.Err().
func (e *Engine) Explain(err error) error {
	if err == nil {
		return nil
	}
	return e.explain(errors.New("reading the result failed"), err)
}

// explain wraps a DuckDB error: it names the objects whose local files the
// message mentions, and otherwise keeps DuckDB's text.
func (e *Engine) explain(what, err error) error {
	msg := err.Error()
	var keys []string
	for p, k := range e.keyOf {
		if strings.Contains(msg, p) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) > 0 {
		// DuckDB's message quotes the statement, which for a view lists
		// every file: keep only the message.
		if i := strings.Index(msg, "\nLINE "); i > 0 {
			err = errors.New(strings.TrimSpace(msg[:i]))
		}
		return fmt.Errorf("%v: lake object %s cannot be read (corrupt or truncated?): %w", what, strings.Join(keys, ", "), err)
	}
	return fmt.Errorf("%v: %w", what, err)
}

// Close releases the database and its spill directory.
func (e *Engine) Close() error {
	err := e.db.Close()
	if e.tmp != "" {
		os.RemoveAll(e.tmp)
	}
	return err
}

// KeyOf maps the local path of each object to its key.
func (e *Engine) KeyOf() map[string]string { return e.keyOf }

// ReadList is a SQL list literal of local paths, for table functions such
// as read_parquet and parquet_metadata.
func ReadList(paths []string) string {
	q := make([]string, len(paths))
	for i, p := range paths {
		q[i] = Literal(p)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// TagColumns tells which string columns of a telemetry view are tags (line
// protocol needs the difference; Parquet types do not show it). A file
// with the key-value metadata schema.MetaTags (a comma-separated list, as
// the sink's and compacted objects carry) is taken at its word; for other
// files, the sink's convention decides: tags are dictionary-encoded,
// string fields plain.
func TagColumns(ctx context.Context, e *Engine, v View) (map[string]bool, error) {
	list := ReadList(v.Paths)
	q := `WITH kv AS (
	SELECT file_name, decode(value) AS tags FROM parquet_kv_metadata(` + list + `) WHERE decode(key) = ` + Literal(schema.MetaTags) + `
), enc AS (
	SELECT DISTINCT file_name, path_in_schema AS col FROM parquet_metadata(` + list + `)
	WHERE type = 'BYTE_ARRAY' AND encodings LIKE '%DICTIONARY%'
)
SELECT col FROM enc WHERE file_name NOT IN (SELECT file_name FROM kv)
UNION
SELECT unnest(string_split(tags, ',')) FROM kv`
	rows, err := e.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("cannot read the metadata of %s: %w", v.Name, err)
	}
	defer rows.Close()
	tags := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		if c != "" {
			tags[c] = true
		}
	}
	return tags, e.Explain(rows.Err())
}
