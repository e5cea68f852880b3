package sink_test

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/query/querytest"
	"github.com/simtel/simtel/lake/replay"
	"github.com/simtel/simtel/lake/schema"
	"github.com/simtel/simtel/sink"
)

// TestEncoderMatchesLakeSchema: the sink's encoder, fed samples as line
// protocol, writes the same bytes and catalog columns as lake/schema's
// row writer (which writes the test data of the lake's readers) given the
// same samples. So readers tested on generated lakes are tested on the
// sink's objects.
func TestEncoderMatchesLakeSchema(t *testing.T) {
	const topic, partition = "telemetry", int32(2)
	ss := querytest.GenSamples(11, []string{"r1", "r2"}, 700, 1)
	enc := sink.NewEncoder(topic, partition, true)
	groups := map[string][]replay.Sample{}
	for i := range ss {
		s := &ss[i]
		s.Partition = partition
		line, err := replay.AppendLine(nil, s)
		if err != nil {
			t.Fatal(err)
		}
		enc.Add(&sink.Record{Offset: s.Offset, Timestamp: time.Unix(0, s.Time), Key: []byte(s.Tags["run"] + "/" + s.Tags["host"]), Value: line})
		g := fmt.Sprint(s.Measurement, "/", s.Tags["run"], "/", lake.Date(time.Unix(0, s.Time)))
		groups[g] = append(groups[g], *s)
	}
	objs, err := enc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != len(groups) {
		t.Fatalf("encoder wrote %d objects, want one per measurement, run and day: %d", len(objs), len(groups))
	}
	first, last := ss[0].Offset, ss[len(ss)-1].Offset
	for _, o := range objs {
		g := fmt.Sprint(o.Entry.Measurement, "/", o.Entry.Run, "/", o.Entry.Date)
		group := groups[g]
		if len(group) == 0 {
			t.Fatalf("object %s has no samples", o.Key)
		}
		// Row order must not matter to the row writer.
		slices.SortFunc(group, func(a, b replay.Sample) int { return -cmp.Compare(a.Offset, b.Offset) })
		var buf bytes.Buffer
		cols, err := querytest.EncodeTelemetry(&buf, schema.Origin{Topic: topic, Partition: partition, First: first, Last: last}, group)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), o.Data) {
			t.Errorf("%s: lake/schema wrote %d bytes, the sink %d bytes, not the same", o.Key, buf.Len(), len(o.Data))
		}
		if !slices.Equal(cols, o.Entry.Columns) {
			t.Errorf("%s: columns %v, the sink's %v", o.Key, cols, o.Entry.Columns)
		}
	}
}
