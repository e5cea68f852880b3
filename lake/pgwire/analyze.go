package pgwire

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// tableRef is one table a statement reads, with what its own WHERE clause
// says about run and time: the conditions the catalog can prune with.
type tableRef struct {
	name string
	// restricted: the table is the only FROM item of a SELECT whose WHERE
	// is a conjunction holding the bounds below.
	run          bound
	from, to     bound
	toInclusive  bool
	fromExcluded bool
}

// bound is a constant of a condition or the parameter standing for it.
type bound struct {
	set   bool
	value string // a constant's text
	param int    // $n, 0 for a constant
}

// statementRefs parses DuckDB's JSON form of a statement (json_serialize_sql)
// into the tables it reads.
func statementRefs(js string) ([]tableRef, error) {
	var doc struct {
		Error        bool   `json:"error"`
		ErrorMessage string `json:"error_message"`
		Statements   []any  `json:"statements"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		return nil, fmt.Errorf("cannot read the parsed statement: %w", err)
	}
	if doc.Error {
		return nil, fmt.Errorf("%s", doc.ErrorMessage)
	}
	var refs []tableRef
	for _, s := range doc.Statements {
		walk(s, &refs)
	}
	return refs, nil
}

// walk collects the base tables under v. A SELECT whose FROM is one base
// table records that table with the bounds of its WHERE clause; any other
// base table is recorded without bounds.
func walk(v any, refs *[]tableRef) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walk(e, refs)
		}
	case map[string]any:
		if x["type"] == "SELECT_NODE" {
			if ft, ok := x["from_table"].(map[string]any); ok && ft["type"] == "BASE_TABLE" {
				r := baseRef(ft)
				alias, _ := ft["alias"].(string)
				conjuncts(x["where_clause"], func(e map[string]any) { r.restrict(e, alias) })
				*refs = append(*refs, r)
				for k, c := range x {
					if k != "from_table" {
						walk(c, refs)
					}
				}
				return
			}
		}
		if x["type"] == "BASE_TABLE" {
			if _, ok := x["table_name"].(string); ok {
				*refs = append(*refs, baseRef(x))
				return
			}
		}
		for _, c := range x {
			walk(c, refs)
		}
	}
}

func baseRef(m map[string]any) tableRef {
	name, _ := m["table_name"].(string)
	if schema, _ := m["schema_name"].(string); schema != "" && !strings.EqualFold(schema, "main") && !strings.EqualFold(schema, "public") {
		name = schema + "." + name
	}
	return tableRef{name: name}
}

// conjuncts calls f on each term of an AND chain (or the one condition).
func conjuncts(v any, f func(map[string]any)) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if m["class"] == "CONJUNCTION" && m["type"] == "CONJUNCTION_AND" {
		if cs, ok := m["children"].([]any); ok {
			for _, c := range cs {
				conjuncts(c, f)
			}
		}
		return
	}
	f(m)
}

// restrict notes the bound a condition sets on run or time.
func (r *tableRef) restrict(e map[string]any, alias string) {
	switch e["class"] {
	case "BETWEEN":
		if r.column(e["input"], alias) != "time" {
			return
		}
		lo, hi := constant(e["lower"]), constant(e["upper"])
		if lo.set {
			r.from = lo
		}
		if hi.set {
			r.to, r.toInclusive = hi, true
		}
	case "COMPARISON":
		typ, _ := e["type"].(string)
		col, val := r.column(e["left"], alias), constant(e["right"])
		if col == "" {
			col, val = r.column(e["right"], alias), constant(e["left"])
			typ = flip(typ)
		}
		if !val.set {
			return
		}
		switch {
		case col == "run" && typ == "COMPARE_EQUAL":
			r.run = val
		case col != "time":
		case typ == "COMPARE_EQUAL":
			r.from, r.to, r.toInclusive = val, val, true
		case typ == "COMPARE_GREATERTHANOREQUALTO" || typ == "COMPARE_GREATERTHAN":
			r.from = val
		case typ == "COMPARE_LESSTHAN":
			r.to, r.toInclusive = val, false
		case typ == "COMPARE_LESSTHANOREQUALTO":
			r.to, r.toInclusive = val, true
		}
	}
}

func flip(t string) string {
	switch t {
	case "COMPARE_GREATERTHAN":
		return "COMPARE_LESSTHAN"
	case "COMPARE_LESSTHAN":
		return "COMPARE_GREATERTHAN"
	case "COMPARE_GREATERTHANOREQUALTO":
		return "COMPARE_LESSTHANOREQUALTO"
	case "COMPARE_LESSTHANOREQUALTO":
		return "COMPARE_GREATERTHANOREQUALTO"
	}
	return t
}

// column is the lower-case name of a column reference to this table
// (unqualified, or qualified by its name or alias), else "".
func (r *tableRef) column(v any, alias string) string {
	m, ok := v.(map[string]any)
	if !ok || m["class"] != "COLUMN_REF" {
		return ""
	}
	parts, _ := m["column_names"].([]any)
	switch len(parts) {
	case 1:
		s, _ := parts[0].(string)
		return strings.ToLower(s)
	case 2:
		q, _ := parts[0].(string)
		s, _ := parts[1].(string)
		if strings.EqualFold(q, r.name) || alias != "" && strings.EqualFold(q, alias) {
			return strings.ToLower(s)
		}
	}
	return ""
}

// constant reads a string or number constant, a cast of one (as in
// '2026-01-01'::timestamptz), or a parameter.
func constant(v any) bound {
	m, ok := v.(map[string]any)
	if !ok {
		return bound{}
	}
	switch m["class"] {
	case "CAST":
		return constant(m["child"])
	case "PARAMETER":
		id, _ := m["identifier"].(string)
		n, err := strconv.Atoi(id)
		if err != nil || n < 1 {
			return bound{}
		}
		return bound{set: true, param: n}
	case "CONSTANT":
		val, _ := m["value"].(map[string]any)
		if null, _ := val["is_null"].(bool); null {
			return bound{}
		}
		switch x := val["value"].(type) {
		case string:
			return bound{set: true, value: x}
		case float64:
			return bound{set: true, value: strconv.FormatFloat(x, 'f', -1, 64)}
		}
	}
	return bound{}
}

// resolve is the text of b, looking parameters up in args.
func (b bound) resolve(args []any) (string, bool) {
	if !b.set {
		return "", false
	}
	if b.param == 0 {
		return b.value, true
	}
	if b.param > len(args) || args[b.param-1] == nil {
		return "", false
	}
	switch x := args[b.param-1].(type) {
	case string:
		return x, true
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano), true
	}
	return "", false
}

// pruning is what the catalog selects objects by for one statement.
type pruning struct {
	run      string
	from, to time.Time // zero: unbounded
}

// prune combines the refs to the lake's tables: a run or time bound holds
// only when every such ref has it (a table read twice, once for another
// run, needs both runs' objects).
func prune(refs []tableRef, args []any) pruning {
	var p pruning
	if len(refs) == 0 {
		return p
	}
	runs := map[string]bool{}
	allRun, allFrom, allTo := true, true, true
	for _, r := range refs {
		if run, ok := r.run.resolve(args); ok {
			runs[run] = true
		} else {
			allRun = false
		}
		if s, ok := r.from.resolve(args); ok {
			if t, ok := parseTime(s); ok {
				if p.from.IsZero() || t.Before(p.from) {
					p.from = t
				}
			} else {
				allFrom = false
			}
		} else {
			allFrom = false
		}
		if s, ok := r.to.resolve(args); ok {
			if t, ok := parseTime(s); ok {
				if r.toInclusive {
					t = t.Add(time.Nanosecond)
				}
				if t.After(p.to) {
					p.to = t
				}
			} else {
				allTo = false
			}
		} else {
			allTo = false
		}
	}
	if allRun && len(runs) == 1 {
		for run := range runs {
			p.run = run
		}
	}
	if !allFrom {
		p.from = time.Time{}
	}
	if !allTo {
		p.to = time.Time{}
	}
	return p
}
