package query

import (
	"context"
	"database/sql"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/simtel/simtel/lake/catalog"
)

// TypeConflict is a column of a telemetry view that its objects hold in
// more than one type. Sinks fix a field's type at first sight (see
// catalog.FieldType), so only a lake written before that mixes types; its
// views read each such column in one type, so that numeric functions work:
// the fixed type when the catalog records one, else the type of the oldest
// object holding the column. Objects that hold the column in another type
// show NULL there; their values are rows of the topic's dead-letter view
// (see hiddenValues), and `simtel lake query` says so.
type TypeConflict struct {
	Column string
	Type   string   // the type read: catalog.TypeFloat, …
	Hidden []string // keys of the objects whose values of the column read as NULL
}

// hiddenValues is one column of one object that a telemetry view reads as
// NULL because the object holds it in another type than the view's.
type hiddenValues struct {
	measurement, column string
	kind, chosen        string // the object's type and the view's, as catalog type names
	key, path           string // the object and its local file
}

// reason is the dead-letter reason of the values: the words of the sink's
// own type-conflict dead letters, plus where the value lies.
func (h hiddenValues) reason() string {
	return fmt.Sprintf("field type conflict: field %q is %s in %s, but measurement %q reads it as %s (a lake written before field types were fixed)",
		h.column, h.kind, h.key, h.measurement, h.chosen)
}

// deadLetterSelect reads the values of h as dead-letter rows: one row per
// row of the object holding a value in the column, with its partition,
// offset and time, the value as text in value, and the reason; measurement
// and field tell where it comes from (NULL in the sink's own dead letters).
func deadLetterSelect(h hiddenValues, hive bool) string {
	c := Ident(h.column)
	sel := "SELECT _partition, _offset, CAST(\"time\" AS TIMESTAMPTZ) AS \"timestamp\", CAST(NULL AS BLOB) AS \"key\", " +
		"encode(CAST(" + c + " AS VARCHAR)) AS \"value\", " + Literal(h.reason()) + " AS reason, " +
		Literal(h.measurement) + " AS measurement, " + Literal(h.column) + " AS field"
	if hive {
		// The sink's dead-letter objects have a date= directory, as
		// telemetry objects do: the view keeps one date column.
		sel += ", \"date\""
	}
	return "(" + sel + " FROM " + ReadParquet([]string{h.path}, hive) + " WHERE " + c + " IS NOT NULL)"
}

// topicOfTelemetry reads the topic from a telemetry key, whose file name is
// <escaped topic>-<partition>-<first>-<last>.parquet (the topic may hold
// dashes, the numbers do not).
func topicOfTelemetry(key string) string {
	name := strings.TrimSuffix(path.Base(key), ".parquet")
	for range 3 {
		i := strings.LastIndexByte(name, '-')
		if i < 0 {
			return ""
		}
		name = name[:i]
	}
	return Unescape(name)
}

// fileType is a column's type in one Parquet file, as catalog type names.
type fileType struct {
	path, column, kind string
}

// kindOf classifies a Parquet column by its physical, converted and logical
// types (as DuckDB's parquet_schema prints them) into a catalog type name.
func kindOf(physical, converted, logical string) string {
	switch physical {
	case "BOOLEAN":
		return catalog.TypeBoolean
	case "DOUBLE", "FLOAT":
		return catalog.TypeFloat
	case "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY":
		return catalog.TypeString
	case "INT64", "INT32":
		l := strings.ToLower(strings.ReplaceAll(logical, " ", ""))
		if strings.HasPrefix(converted, "UINT") || strings.Contains(l, "issigned=false") || strings.Contains(l, "issigned=0") {
			return catalog.TypeUnsigned
		}
		return catalog.TypeInteger
	}
	return strings.ToLower(physical)
}

// duckType is the DuckDB type a column of a catalog type reads as.
func duckType(kind string) string {
	switch kind {
	case catalog.TypeFloat:
		return "DOUBLE"
	case catalog.TypeInteger:
		return "BIGINT"
	case catalog.TypeUnsigned:
		return "UBIGINT"
	case catalog.TypeBoolean:
		return "BOOLEAN"
	}
	return "VARCHAR"
}

// fixedColumns are the columns every telemetry object has in one type.
var fixedColumns = []string{"time", "_partition", "_offset", "_time_ns"}

// typedSource is the FROM clause of a telemetry view: read_parquet over
// its files when they agree on every column's type, else a UNION ALL BY
// NAME of groups of files, each reading the columns it holds in another
// type than the chosen one as NULL of the chosen type.
//
// It also returns the columns of objects that read as NULL that way.
func typedSource(ctx context.Context, db *sql.DB, v *View, fixed map[string]string, hive bool) (string, []TypeConflict, []hiddenValues, error) {
	plain := ReadParquet(v.Paths, hive)
	if len(v.Paths) < 2 {
		return plain, nil, nil, nil
	}
	rows, err := db.QueryContext(ctx, `SELECT file_name, name, type, coalesce(converted_type, ''), coalesce(logical_type, '')
FROM parquet_schema(`+ReadList(v.Paths)+`) WHERE num_children IS NULL OR num_children = 0`)
	if err != nil {
		return "", nil, nil, err
	}
	defer rows.Close()
	var fts []fileType
	kinds := map[string]map[string]bool{} // column → kinds seen
	for rows.Next() {
		var path, name, physical, converted, logical string
		if err := rows.Scan(&path, &name, &physical, &converted, &logical); err != nil {
			return "", nil, nil, err
		}
		if slices.Contains(fixedColumns, name) {
			continue
		}
		ft := fileType{path: path, column: name, kind: kindOf(physical, converted, logical)}
		fts = append(fts, ft)
		if kinds[name] == nil {
			kinds[name] = map[string]bool{}
		}
		kinds[name][ft.kind] = true
	}
	if err := rows.Err(); err != nil {
		return "", nil, nil, err
	}
	var mixed []string
	for col, ks := range kinds {
		if len(ks) > 1 {
			mixed = append(mixed, col)
		}
	}
	if len(mixed) == 0 {
		return plain, nil, nil, nil
	}
	sort.Strings(mixed)
	// The oldest object holding a column decides its type when the catalog
	// has none: objects in order of their first sample, then key.
	order := make([]int, len(v.Objects))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		oa, ob := v.Objects[order[a]], v.Objects[order[b]]
		if !oa.MinTime.Equal(ob.MinTime) {
			return oa.MinTime.Before(ob.MinTime)
		}
		return oa.Key < ob.Key
	})
	rank := map[string]int{}
	keyOf := map[string]string{}
	for r, i := range order {
		rank[v.Paths[i]] = r
		keyOf[v.Paths[i]] = v.Objects[i].Key
	}
	chosen := map[string]string{}
	chosenRank := map[string]int{}
	for _, ft := range fts {
		if !slices.Contains(mixed, ft.column) {
			continue
		}
		if t, ok := fixed[ft.column]; ok {
			chosen[ft.column] = t
			continue
		}
		if r, ok := chosenRank[ft.column]; !ok || rank[ft.path] < r {
			chosen[ft.column], chosenRank[ft.column] = ft.kind, rank[ft.path]
		}
	}
	// Group the files by the set of columns they hold in another type.
	nullCols := map[string][]string{} // path → columns read as NULL
	conflicts := map[string]*TypeConflict{}
	var hidden []hiddenValues
	for _, ft := range fts {
		if t, ok := chosen[ft.column]; ok && ft.kind != t {
			nullCols[ft.path] = append(nullCols[ft.path], ft.column)
			hidden = append(hidden, hiddenValues{measurement: v.Measurement, column: ft.column,
				kind: ft.kind, chosen: t, key: keyOf[ft.path], path: ft.path})
			c := conflicts[ft.column]
			if c == nil {
				c = &TypeConflict{Column: ft.column, Type: t}
				conflicts[ft.column] = c
			}
			c.Hidden = append(c.Hidden, keyOf[ft.path])
		}
	}
	groups := map[string][]string{}
	var sigs []string
	for _, p := range v.Paths {
		cols := nullCols[p]
		sort.Strings(cols)
		sig := strings.Join(cols, "\x00")
		if _, ok := groups[sig]; !ok {
			sigs = append(sigs, sig)
		}
		groups[sig] = append(groups[sig], p)
	}
	sort.Strings(sigs)
	var parts []string
	for _, sig := range sigs {
		sel := "SELECT *"
		if sig != "" {
			var repl []string
			for _, c := range strings.Split(sig, "\x00") {
				repl = append(repl, "CAST(NULL AS "+duckType(chosen[c])+") AS "+Ident(c))
			}
			sel += " REPLACE (" + strings.Join(repl, ", ") + ")"
		}
		parts = append(parts, "("+sel+" FROM "+ReadParquet(groups[sig], hive)+")")
	}
	var out []TypeConflict
	for _, col := range mixed {
		c := conflicts[col]
		sort.Strings(c.Hidden)
		out = append(out, *c)
	}
	sort.Slice(hidden, func(i, j int) bool {
		if hidden[i].key != hidden[j].key {
			return hidden[i].key < hidden[j].key
		}
		return hidden[i].column < hidden[j].column
	})
	return "(" + strings.Join(parts, " UNION ALL BY NAME ") + ")", out, hidden, nil
}
