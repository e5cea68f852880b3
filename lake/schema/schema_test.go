package schema_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/simtel/simtel/lake/schema"
)

// describe lists what readers of an object depend on: each column's name,
// repetition, physical and logical type, the key-value metadata in file
// order, the writer, and per column chunk of the first row group its
// codec, encodings and whether it has statistics.
func describe(t *testing.T, data []byte) string {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	md := r.MetaData()
	var b strings.Builder
	fmt.Fprintf(&b, "created_by %s\n", md.GetCreatedBy())
	sc := md.Schema
	for i := range sc.NumColumns() {
		c := sc.Column(i)
		fmt.Fprintf(&b, "column %s %s %s %s\n", c.Path(), c.SchemaNode().RepetitionType(), c.PhysicalType(), c.LogicalType())
	}
	kv := md.KeyValueMetadata()
	for i, k := range kv.Keys() {
		fmt.Fprintf(&b, "meta %s=%s\n", k, kv.Values()[i])
	}
	fmt.Fprintf(&b, "row groups %d rows %d\n", md.NumRowGroups(), md.NumRows)
	rg := md.RowGroup(0)
	for i := range rg.NumColumns() {
		cc, err := rg.ColumnChunk(i)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := cc.StatsSet()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "chunk %s %s %v stats=%v\n", cc.PathInSchema(), cc.Compression(), cc.Encodings(), ok)
	}
	return b.String()
}

// TestTelemetryObjectPinned pins the on-disk form of a telemetry object:
// column names, types and order, key-value metadata, writer properties. A
// change here changes what every reader of the lake sees.
func TestTelemetryObjectPinned(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	rows := []schema.Row{
		{TimeNS: t0 + 2000, Partition: 3, Offset: 11, Tags: map[string]string{"host": "b", "run": "r"},
			Fields: map[string]any{"f": 1.5, "i": int64(-2), "u": uint64(1 << 63), "ok": true, "msg": "x"}},
		{TimeNS: t0 + 1000, Partition: 3, Offset: 12, Tags: map[string]string{"host": "a"},
			Fields: map[string]any{"f": 2.5}},
	}
	var buf bytes.Buffer
	l, err := schema.Encode(&buf, "cpu", schema.Origin{Topic: "telemetry", Partition: 3, First: 10, Last: 12}, rows)
	if err != nil {
		t.Fatal(err)
	}
	const want = `created_by simtel-sink version 1
column _offset required INT64 Int(bitWidth=64, isSigned=true)
column _partition required INT32 Int(bitWidth=32, isSigned=true)
column _time_ns required INT64 Int(bitWidth=64, isSigned=true)
column f optional DOUBLE None
column host optional BYTE_ARRAY String
column i optional INT64 Int(bitWidth=64, isSigned=true)
column msg optional BYTE_ARRAY String
column ok optional BOOLEAN None
column run optional BYTE_ARRAY String
column time required INT64 Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)
column u optional INT64 Int(bitWidth=64, isSigned=false)
meta simtel.topic=telemetry
meta simtel.partition=3
meta simtel.first_offset=10
meta simtel.last_offset=12
meta simtel.tags=host,run
row groups 1 rows 2
chunk _offset ZSTD [DELTA_BINARY_PACKED RLE] stats=true
chunk _partition ZSTD [PLAIN RLE] stats=true
chunk _time_ns ZSTD [DELTA_BINARY_PACKED RLE] stats=true
chunk f ZSTD [PLAIN RLE] stats=true
chunk host ZSTD [RLE_DICTIONARY PLAIN RLE] stats=true
chunk i ZSTD [PLAIN RLE] stats=true
chunk msg ZSTD [PLAIN RLE] stats=true
chunk ok ZSTD [PLAIN RLE] stats=true
chunk run ZSTD [RLE_DICTIONARY PLAIN RLE] stats=true
chunk time ZSTD [PLAIN RLE] stats=true
chunk u ZSTD [PLAIN RLE] stats=true
`
	if got := describe(t, buf.Bytes()); got != want {
		t.Errorf("telemetry object:\n%s\nwant:\n%s", got, want)
	}
	if got := strings.Join(l.Names(), ","); got != "_offset,_partition,_time_ns,f,host,i,msg,ok,run,time,u" {
		t.Errorf("layout names %s", got)
	}
	// Rows in (time, offset) order, time in whole microseconds.
	if got := int64Column(t, buf.Bytes(), "_offset"); fmt.Sprint(got) != "[12 11]" {
		t.Errorf("_offset %v, want [12 11]", got)
	}
	if got := int64Column(t, buf.Bytes(), "time"); fmt.Sprint(got) != fmt.Sprint([]int64{t0/1000 + 1, t0/1000 + 2}) {
		t.Errorf("time %v", got)
	}
}

// int64Column reads an INT64 column of the first row group.
func int64Column(t *testing.T, data []byte, name string) []int64 {
	t.Helper()
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	i := r.MetaData().Schema.ColumnIndexByName(name)
	cr, err := r.RowGroup(0).Column(i)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]int64, r.MetaData().NumRows)
	n, _, err := cr.(*file.Int64ColumnChunkReader).ReadBatch(int64(len(v)), v, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return v[:n]
}

// TestRecordObjectsPinned pins the on-disk form of raw and dead-letter
// objects.
func TestRecordObjectsPinned(t *testing.T) {
	ts := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	o := schema.Origin{Topic: "jobs", Partition: 1, First: 5, Last: 6}
	raw, err := schema.EncodeRecords([]schema.RawRow{{Partition: 1, Offset: 5, Timestamp: ts, Key: []byte("k"), Headers: []schema.Header{{Key: "h", Value: []byte("v")}}}}, o)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := schema.EncodeRecords([]schema.DeadLetterRow{{Partition: 1, Offset: 6, Timestamp: ts, Value: []byte("x"), Reason: "bad"}}, o)
	if err != nil {
		t.Fatal(err)
	}
	const meta = `meta simtel.topic=jobs
meta simtel.partition=1
meta simtel.first_offset=5
meta simtel.last_offset=6
row groups 1 rows 1
`
	for _, c := range []struct {
		data []byte
		cols []string
		want string
	}{
		{raw, schema.RawColumns, `column _partition required INT32 Int(bitWidth=32, isSigned=true)
column _offset required INT64 Int(bitWidth=64, isSigned=true)
column timestamp required INT64 Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)
column key optional BYTE_ARRAY None
column value optional BYTE_ARRAY None
column headers.list.element.key required BYTE_ARRAY String
column headers.list.element.value required BYTE_ARRAY None
`},
		{dead, schema.DeadLetterColumns, `column _partition required INT32 Int(bitWidth=32, isSigned=true)
column _offset required INT64 Int(bitWidth=64, isSigned=true)
column timestamp required INT64 Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, is_from_converted_type=false, force_set_converted_type=false)
column key optional BYTE_ARRAY None
column value optional BYTE_ARRAY None
column reason required BYTE_ARRAY String
`},
	} {
		got := describe(t, c.data)
		head, _, _ := strings.Cut(got, "chunk ")
		if want := "created_by simtel-sink version 1(build )\n" + c.want + meta; head != want {
			t.Errorf("record object:\n%s\nwant:\n%s", head, want)
		}
		var top []string
		for _, line := range strings.Split(c.want, "\n") {
			if f := strings.Fields(line); len(f) > 1 {
				if n, _, _ := strings.Cut(f[1], "."); len(top) == 0 || top[len(top)-1] != n {
					top = append(top, n)
				}
			}
		}
		if strings.Join(top, ",") != strings.Join(c.cols, ",") {
			t.Errorf("columns %v, the object has %v", c.cols, top)
		}
	}
}

func TestTelemetryRejects(t *testing.T) {
	for _, cols := range [][]schema.Column{
		{{Name: "time", Role: schema.Tag}},
		{{Name: "a", Role: schema.Tag}, {Name: "a", Role: schema.Field, Type: schema.Int}},
		{{Name: "a", Role: schema.Field}},
	} {
		if _, err := schema.Telemetry("m", cols); err == nil {
			t.Errorf("columns %v accepted", cols)
		}
	}
	var buf bytes.Buffer
	if _, err := schema.Encode(&buf, "m", schema.Origin{}, []schema.Row{{Fields: map[string]any{"v": int64(1)}}, {Fields: map[string]any{"v": 1.5}}}); err == nil {
		t.Errorf("a field of two types in one object accepted")
	}
}
