package query_test

import (
	"bytes"
	"testing"

	"github.com/simtel/simtel/lake/catalog"
	"github.com/simtel/simtel/lake/query"
)

func TestWriteTables(t *testing.T) {
	views := []query.View{
		{Name: "cpu", Kind: "telemetry", Objects: make([]catalog.Object, 2), Columns: []query.Column{{"time", "TIMESTAMP WITH TIME ZONE"}, {"usage", "DOUBLE"}}},
		{Name: "raw_events", Kind: "raw", Objects: make([]catalog.Object, 1), Columns: []query.Column{{"key", "BLOB"}}},
	}
	for _, c := range []struct {
		format string
		views  []query.View
		want   string
	}{
		{"csv", views, "table,kind,objects,column,type\n" +
			"cpu,telemetry,2,time,TIMESTAMP WITH TIME ZONE\ncpu,telemetry,2,usage,DOUBLE\nraw_events,raw,1,key,BLOB\n"},
		{"json", views[1:], `{"table":"raw_events","kind":"raw","objects":1,"column":"key","type":"BLOB"}` + "\n"},
		{"table", views, "TABLE         KIND       OBJECTS  COLUMN  TYPE\n" +
			`"cpu"         telemetry  2        time    TIMESTAMP WITH TIME ZONE` + "\n" +
			`""                                usage   DOUBLE` + "\n" +
			`"raw_events"  raw        1        key     BLOB` + "\n"},
		{"table", nil, "TABLE  KIND  OBJECTS  COLUMN  TYPE\n(no tables: no lake objects match)\n"},
	} {
		var b bytes.Buffer
		if err := query.WriteTables(&b, c.views, c.format); err != nil {
			t.Fatalf("%s: %v", c.format, err)
		}
		if b.String() != c.want {
			t.Errorf("%s: got\n%s\nwant\n%s", c.format, b.String(), c.want)
		}
	}
	if err := query.WriteTables(new(bytes.Buffer), views, "arrow"); err == nil {
		t.Error("arrow: no error, want one (tables print as text)")
	}
}
