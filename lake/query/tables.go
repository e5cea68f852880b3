package query

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteTables prints views and their columns, one line per column, in
// format table, csv or json (one object per line).
func WriteTables(w io.Writer, views []View, format string) error {
	type col struct {
		Table   string `json:"table"`
		Kind    string `json:"kind"`
		Objects int    `json:"objects"`
		Column  string `json:"column"`
		Type    string `json:"type"`
	}
	var cols []col
	for _, v := range views {
		for _, c := range v.Columns {
			cols = append(cols, col{v.Name, v.Kind, len(v.Objects), c.Name, c.Type})
		}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		for _, c := range cols {
			if err := enc.Encode(c); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write([]string{"table", "kind", "objects", "column", "type"})
		for _, c := range cols {
			cw.Write([]string{c.Table, c.Kind, strconv.Itoa(c.Objects), c.Column, c.Type})
		}
		cw.Flush()
		return cw.Error()
	case "table", "":
	default:
		return fmt.Errorf("table list format %q is not table, csv or json", format)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tKIND\tOBJECTS\tCOLUMN\tTYPE")
	for i, c := range cols {
		name, kind, objs := c.Table, c.Kind, strconv.Itoa(c.Objects)
		if i > 0 && cols[i-1].Table == c.Table {
			name, kind, objs = "", "", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", Ident(name), kind, objs, c.Column, c.Type)
	}
	if len(cols) == 0 {
		fmt.Fprintln(tw, "(no tables: no lake objects match)")
	}
	return tw.Flush()
}
