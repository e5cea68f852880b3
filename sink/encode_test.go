package sink

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/simtel/simtel/lake/schema"
)

// readObject reads a Parquet object back as one map per row, by column name.
func readObject(t testing.TB, data []byte) (*parquet.Schema, []map[string]any) {
	t.Helper()
	f, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("open parquet: %v", err)
	}
	s := f.Schema()
	cols := s.Columns()
	r := parquet.NewReader(f)
	defer r.Close()
	var out []map[string]any
	buf := make([]parquet.Row, 64)
	for {
		n, err := r.ReadRows(buf)
		for _, row := range buf[:n] {
			m := map[string]any{}
			for _, v := range row {
				name := strings.Join(cols[v.Column()], ".")
				if v.IsNull() {
					continue
				}
				leaf, _ := s.Lookup(cols[v.Column()]...)
				switch leaf.Node.Type().Kind() {
				case parquet.Boolean:
					m[name] = v.Boolean()
				case parquet.Int32:
					m[name] = v.Int32()
				case parquet.Int64:
					m[name] = v.Int64()
				case parquet.Double:
					m[name] = v.Double()
				case parquet.ByteArray:
					m[name] = string(v.ByteArray())
				default:
					m[name] = v.String()
				}
			}
			out = append(out, m)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read rows: %v", err)
		}
	}
	return s, out
}

func rec(off int64, value string) *Record {
	return &Record{Offset: off, Timestamp: time.Unix(1700000000, 0), Key: []byte("r1/n1"), Value: []byte(value)}
}

func TestEncodeTypes(t *testing.T) {
	b := newBuffer("telemetry", 3, true)
	now := time.Now
	b.add(rec(10, `cpu,host=n1,run=r1 f=1.5,i=-12i,u=12u,b=t,s="a \"q\"" 1700000000123456789`), now)
	b.add(rec(11, `cpu,cpu=cpu0,host=n1,run=r1 f=2 1700000000000000001`), now)
	b.add(rec(12, `cpu,host=n1,run=r1 f=3,f=4 1700000000999999999`), now) // a repeated key: the last wins
	objs, err := b.encode(&encodeScratch{})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 1 {
		t.Fatalf("got %d objects, want 1", len(objs))
	}
	o := objs[0]
	if want := "telemetry/cpu/run=r1/date=2023-11-14/telemetry-3-00000000000000000010-00000000000000000012.parquet"; o.key != want {
		t.Fatalf("key %q, want %q", o.key, want)
	}
	s, rows := readObject(t, o.data)
	t.Log(s)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want 3", len(rows))
	}
	if r := rows[2]; r["f"] != 4.0 || r["cpu"] != nil || r["i"] != nil || r["_offset"] != int64(12) {
		t.Errorf("row 2 = %v", r)
	}
	// Sorted by time: offset 11 first.
	if rows[0]["_offset"] != int64(11) || rows[0]["cpu"] != "cpu0" || rows[0]["f"] != 2.0 {
		t.Errorf("row 0 = %v", rows[0])
	}
	r := rows[1]
	want := map[string]any{"_offset": int64(10), "_partition": int32(3), "_time_ns": int64(1700000000123456789),
		"time": int64(1700000000123456), "host": "n1", "run": "r1", "f": 1.5, "i": int64(-12), "u": int64(12), "b": true, "s": `a "q"`}
	if fmt.Sprint(r) != fmt.Sprint(want) {
		t.Errorf("row 1 = %v\nwant    %v", r, want)
	}
	if _, ok := rows[0]["s"]; ok {
		t.Errorf("row 0 has s, want null")
	}
	if got := strings.Join(o.obj.Columns, ","); got != "_offset,_partition,_time_ns,b,cpu,f,host,i,run,s,time,u" {
		t.Errorf("columns %s", got)
	}
	for _, path := range []string{"time"} {
		leaf, _ := s.Lookup(path)
		if lt := leaf.Node.Type().LogicalType(); lt == nil || lt.String() != "TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)" {
			t.Errorf("time column type %v, want TIMESTAMP(MICROS, UTC)", leaf.Node.Type())
		}
	}
}

func encodeAll(t *testing.T, b *buffer) map[string]encoded {
	t.Helper()
	objs, err := b.encode(&encodeScratch{})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]encoded{}
	for _, o := range objs {
		m[o.obj.Kind+":"+o.obj.Measurement] = o
	}
	return m
}

// checkReasons checks the dead-letter reason of each line, added at
// offset i: "" for a line that became a row.
func checkReasons(t *testing.T, b *buffer, lines []struct{ line, reason string }) {
	t.Helper()
	got := map[int64]string{}
	for _, d := range b.dead {
		got[d.Offset] = d.Reason
	}
	for i, l := range lines {
		if got[int64(i)] != l.reason {
			t.Errorf("line %q: reason %q, want %q", l.line, got[int64(i)], l.reason)
		}
	}
}

func TestEncodeDeadLetters(t *testing.T) {
	b := newBuffer("telemetry", 1, true)
	now := time.Now
	cases := []struct {
		line, reason string
	}{
		{`cpu,host=a value=1.5 1700000000000000000`, ""},
		{`cpu,host=a value=2i 1700000000000000001`, `field "value" is integer but its column in this object is float`},
		{`cpu,host=a value="x" 1700000000000000002`, `field "value" is string but its column in this object is float`},
		{`cpu,value=tag other=1 1700000000000000003`, `tag "value" has the name of a field column`},
		{`cpu,host=a host=1 1700000000000000004`, `field "host" has the name of a tag column`},
		{`cpu,time=x v=1 1700000000000000005`, `tag "time" uses a reserved column name`},
		{`cpu _offset=1 1700000000000000006`, `field "_offset" uses a reserved column name`},
		{`cpu a=1,a=2i 1700000000000000007`, `field "a" appears twice with types float and integer`},
		{`cpu,host=a value=1e400 1700000000000000008`, "line protocol: invalid number"},
		{`cpu,host=a value=nan 1700000000000000009`, "line protocol: invalid number"},
		{`not line protocol`, "line protocol: invalid field key"},
		{``, "line protocol: empty line"},
		{`cpu,host=a value=1 17x`, "line protocol: unexpected bytes after the timestamp"},
		{`cpu,host= value=1 1`, "line protocol: invalid tag (want key=value with non-empty key and value)"},
		{`cpu s="open 1`, "line protocol: unterminated string field value"},
		{`cpu,host=a value=3.5 1700000000000000010`, ""},
		{`cpu,host=a  value=3.5 1700000000000000011`, "line protocol: no fields"},
	}
	for i, c := range cases {
		b.add(&Record{Offset: int64(i), Timestamp: time.Unix(1700000000, 0), Value: []byte(c.line)}, now)
	}
	checkReasons(t, b, cases)
	objs := encodeAll(t, b)
	dl := objs["deadletter:"]
	if dl.obj.Rows != int64(len(b.dead)) || !strings.HasPrefix(dl.key, "deadletter/telemetry/date=2023-11-14/telemetry-1-") {
		t.Fatalf("dead-letter object %s with %d rows, want %d", dl.key, dl.obj.Rows, len(b.dead))
	}
	_, rows := readObject(t, dl.data)
	if len(rows) != len(b.dead) || rows[0]["reason"] != b.dead[0].Reason || rows[0]["value"] != string(b.dead[0].Value) {
		t.Fatalf("dead-letter rows %v", rows)
	}
	tm := objs["telemetry:cpu"]
	_, trows := readObject(t, tm.data)
	if len(trows)+len(rows) != len(cases) {
		t.Fatalf("%d telemetry + %d dead rows, want %d", len(trows), len(rows), len(cases))
	}
}

// Two flushes of one partition may have different columns and even
// different types for one field: each object carries its own schema.
func TestEncodeSchemaEvolution(t *testing.T) {
	b := newBuffer("telemetry", 0, true)
	now := time.Now
	b.add(rec(1, `m,host=a x=1 1700000000000000000`), now)
	first := encodeAll(t, b)["telemetry:m"]
	b.reset()
	b.add(rec(2, `m,host=a,gpu=0 x=1i,y="s" 1700000000000000000`), now)
	second := encodeAll(t, b)["telemetry:m"]
	if first.key == second.key {
		t.Fatalf("both flushes wrote %s", first.key)
	}
	s1, _ := readObject(t, first.data)
	s2, r2 := readObject(t, second.data)
	if got := strings.Join(first.obj.Columns, ","); got != "_offset,_partition,_time_ns,host,time,x" {
		t.Errorf("first columns %s", got)
	}
	if got := strings.Join(second.obj.Columns, ","); got != "_offset,_partition,_time_ns,gpu,host,time,x,y" {
		t.Errorf("second columns %s", got)
	}
	l1, _ := s1.Lookup("x")
	l2, _ := s2.Lookup("x")
	if l1.Node.Type().Kind() != parquet.Double || l2.Node.Type().Kind() != parquet.Int64 {
		t.Errorf("x is %v then %v, want DOUBLE then INT64", l1.Node.Type(), l2.Node.Type())
	}
	if r2[0]["x"] != int64(1) || r2[0]["y"] != "s" || r2[0]["gpu"] != "0" {
		t.Errorf("second row %v", r2[0])
	}
}

// The same records always give the same bytes: a flush redone after a
// crash overwrites its objects with identical ones.
func TestEncodeDeterministic(t *testing.T) {
	lines := testLines(20_000, 3)
	enc := func(order []int) map[string][]byte {
		b := newBuffer("telemetry", 2, true)
		for _, i := range order {
			b.add(&Record{Offset: int64(i) + 100, Timestamp: time.Unix(0, 1700000000000000000), Key: []byte("k"), Value: lines[i]}, time.Now)
		}
		b.add(&Record{Offset: 100_000, Timestamp: time.Unix(0, 1700000000000000000), Value: []byte("bad line")}, time.Now)
		objs, err := b.encode(&encodeScratch{})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string][]byte{}
		for _, o := range objs {
			m[o.key] = o.data
		}
		return m
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	a, b := enc(order), enc(order)
	if len(a) < 5 {
		t.Fatalf("only %d objects", len(a))
	}
	for k, v := range a {
		if !bytes.Equal(v, b[k]) {
			t.Fatalf("%s differs between two encodings of the same records", k)
		}
	}
}

func TestEncodeRaw(t *testing.T) {
	b := newBuffer("events", 0, false)
	b.add(&Record{Offset: 5, Timestamp: time.Unix(1700000000, 123456789), Key: []byte("k"), Value: []byte{0, 1, 2},
		Headers: []schema.Header{{Key: "h", Value: []byte("v")}}}, time.Now)
	b.add(&Record{Offset: 6, Timestamp: time.Unix(1700000000, 0), Value: []byte("x")}, time.Now)
	objs := encodeAll(t, b)
	raw := objs["raw:"]
	if raw.key != "raw/events/date=2023-11-14/events-0-00000000000000000005-00000000000000000006.parquet" || raw.obj.Rows != 2 {
		t.Fatalf("raw object %s rows %d", raw.key, raw.obj.Rows)
	}
	s, rows := readObject(t, raw.data)
	t.Log(s)
	if rows[0]["key"] != "k" || rows[0]["value"] != "\x00\x01\x02" || rows[0]["headers.list.element.key"] != "h" || rows[0]["timestamp"] != int64(1700000000123456) {
		t.Fatalf("raw rows %v", rows)
	}
	if _, ok := rows[1]["key"]; ok {
		t.Fatalf("nil key stored as %v", rows[1]["key"])
	}
}

// Columns grow in blocks: a column that first appears after several blocks
// of rows reads back null before it and right where it is set.
func TestEncodeLateColumnAcrossBlocks(t *testing.T) {
	b := newBuffer("telemetry", 0, true)
	const n = 3*blockRows + 100
	for i := range n {
		line := fmt.Sprintf("m,host=h%d v=%di %d", i%3, i, 1700000000000000000+int64(i))
		if i == 2*blockRows+5 || i == n-1 {
			line = fmt.Sprintf("m,host=h%d,late=yes v=%di,w=%d %d", i%3, i, i, 1700000000000000000+int64(i))
		}
		b.add(rec(int64(i), line), time.Now)
	}
	_, rows := readObject(t, encodeAll(t, b)["telemetry:m"].data)
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for i, r := range rows {
		late := i == 2*blockRows+5 || i == n-1
		if r["v"] != int64(i) || r["host"] != fmt.Sprintf("h%d", i%3) {
			t.Fatalf("row %d = %v", i, r)
		}
		if _, ok := r["w"]; ok != late || late && (r["w"] != float64(i) || r["late"] != "yes") {
			t.Fatalf("row %d = %v (late column set: %v)", i, r, late)
		}
	}
}

// Tags are dictionary-coded by the sink and written as indexes: the file
// must still say which columns are tags (key-value metadata simtel.tags),
// encode them with a dictionary, and carry correct min/max/null statistics
// per row group, as a reader that prunes by them needs.
func TestEncodeTagsDictionaryAndStats(t *testing.T) {
	b := newBuffer("telemetry", 0, true)
	const n = schema.RowGroupRows + 3000 // two row groups
	for i := range n {
		host := fmt.Sprintf("h%02d", i%7)
		line := fmt.Sprintf("m,host=%s,run=r v=%d,s=\"x%d\" %d", host, i, i%3, 1700000000000000000+int64(i))
		if i%5 == 0 {
			line = fmt.Sprintf("m,run=r v=%d %d", i, 1700000000000000000+int64(i)) // host null
		}
		if i >= schema.RowGroupRows {
			line = fmt.Sprintf("m,host=z%d,run=r v=%d %d", i%2, i, 1700000000000000000+int64(i))
		}
		b.add(rec(int64(i), line), time.Now)
	}
	o := encodeAll(t, b)["telemetry:m"]
	f, err := parquet.OpenFile(bytes.NewReader(o.data), int64(len(o.data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.Lookup("simtel.tags"); !ok || v != "host,run" {
		t.Errorf("simtel.tags = %q (present %v), want \"host,run\"", v, ok)
	}
	if v, _ := f.Lookup("simtel.first_offset"); v != "0" {
		t.Errorf("simtel.first_offset = %q, want 0", v)
	}
	md := f.Metadata()
	if len(md.RowGroups) != 2 {
		t.Fatalf("%d row groups, want 2", len(md.RowGroups))
	}
	type want struct {
		min, max string
		nulls    int64
	}
	wants := []want{{"h00", "h06", schema.RowGroupRows / 5}, {"z0", "z1", 0}}
	if schema.RowGroupRows%5 != 0 {
		wants[0].nulls++
	}
	for g, rg := range md.RowGroups {
		for _, cc := range rg.Columns {
			md := cc.MetaData
			name := strings.Join(md.PathInSchema, ".")
			dict := false
			for _, e := range md.Encoding {
				if e.String() == "RLE_DICTIONARY" {
					dict = true
				}
			}
			switch name {
			case "host":
				if !dict {
					t.Errorf("row group %d: tag host encodings %v, want RLE_DICTIONARY", g, md.Encoding)
				}
				st := md.Statistics
				if string(st.MinValue) != wants[g].min || string(st.MaxValue) != wants[g].max || st.NullCount != wants[g].nulls {
					t.Errorf("row group %d: host statistics min %q max %q nulls %d, want %+v", g, st.MinValue, st.MaxValue, st.NullCount, wants[g])
				}
			case "s":
				if dict {
					t.Errorf("row group %d: string field s is dictionary-encoded (%v); only tags are", g, md.Encoding)
				}
			}
		}
	}
	_, rows := readObject(t, o.data)
	for i, r := range rows {
		want := fmt.Sprintf("h%02d", i%7)
		switch {
		case i >= schema.RowGroupRows:
			want = fmt.Sprintf("z%d", i%2)
		case i%5 == 0:
			want = ""
		}
		if got, _ := r["host"].(string); got != want {
			t.Fatalf("row %d host %q, want %q", i, got, want)
		}
	}
}

// Lines of one series (same measurement and tags) decode through the
// buffer's series cache: its binding to a table must follow the line's
// date, and a binding left incomplete by a dead line must be checked again
// against columns made since.
func TestEncodeSeriesAcrossTables(t *testing.T) {
	const day = int64(24 * time.Hour)
	t0 := int64(1700000000000000000)
	b := newBuffer("telemetry", 0, true)
	lines := []struct {
		line, reason string
	}{
		{fmt.Sprintf("m,host=a v=1 %d", t0), ""},
		{fmt.Sprintf("m,host=a v=2 %d", t0+day), ""},
		{fmt.Sprintf("m,host=a v=3 %d", t0+1), ""},
		{fmt.Sprintf("m,host=b,y=1 _offset=1 %d", t0+2), `field "_offset" uses a reserved column name`},
		{fmt.Sprintf("m,host=c y=5 %d", t0+3), ""},
		{fmt.Sprintf("m,host=b,y=1 v=4 %d", t0+4), `tag "y" has the name of a field column`},
		{fmt.Sprintf("m,host=b,y=1 v=5 %d", t0+day+1), ""}, // the other day's table has no field y
		{fmt.Sprintf("m,host=a v=6 %d", t0+day+2), ""},
	}
	for i, l := range lines {
		b.add(rec(int64(i), l.line), time.Now)
	}
	checkReasons(t, b, lines)
	objs, err := b.encode(&encodeScratch{})
	if err != nil {
		t.Fatal(err)
	}
	var days []string
	for _, o := range objs {
		if o.obj.Kind != "telemetry" {
			continue
		}
		_, rows := readObject(t, o.data)
		var s []string
		for _, r := range rows {
			s = append(s, fmt.Sprintf("%v:%v:%v:%v", r["_offset"], r["host"], r["y"], r["v"]))
		}
		days = append(days, o.obj.Date+" "+strings.Join(s, " "))
	}
	want := []string{
		"2023-11-14 0:a:<nil>:1 2:a:<nil>:3 4:c:5:<nil>",
		"2023-11-15 1:a:<nil>:2 6:b:1:5 7:a:<nil>:6",
	}
	if strings.Join(days, "\n") != strings.Join(want, "\n") {
		t.Errorf("objects:\n%s\nwant:\n%s", strings.Join(days, "\n"), strings.Join(want, "\n"))
	}
}

// Column names with dots are one flat column each (the writer's per-column
// options address columns by dotted path): a dotted tag stays a
// dictionary-encoded tag.
func TestEncodeDottedNames(t *testing.T) {
	b := newBuffer("telemetry", 0, true)
	b.add(rec(1, `m,k8s.pod=p1,run=r gpu.util=0.5,n.x="s" 1700000000000000000`), time.Now)
	b.add(rec(2, `m,k8s.pod=p2,run=r gpu.util=0.7 1700000000000000001`), time.Now)
	o := encodeAll(t, b)["telemetry:m"]
	if o.data == nil {
		t.Fatalf("no telemetry object; dead letters: %v", b.dead)
	}
	f, err := parquet.OpenFile(bytes.NewReader(o.data), int64(len(o.data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := f.Lookup("simtel.tags"); v != "k8s.pod,run" {
		t.Errorf("simtel.tags = %q, want \"k8s.pod,run\"", v)
	}
	for _, cc := range f.Metadata().RowGroups[0].Columns {
		if name := strings.Join(cc.MetaData.PathInSchema, "."); name == "k8s.pod" || name == "n.x" {
			dict := strings.Contains(fmt.Sprint(cc.MetaData.Encoding), "RLE_DICTIONARY")
			if dict != (name == "k8s.pod") {
				t.Errorf("column %s encodings %v", name, cc.MetaData.Encoding)
			}
		}
	}
	_, rows := readObject(t, o.data)
	if len(rows) != 2 || rows[0]["k8s.pod"] != "p1" || rows[1]["k8s.pod"] != "p2" || rows[1]["gpu.util"] != 0.7 || rows[0]["n.x"] != "s" {
		t.Fatalf("rows %v", rows)
	}
}
