package catalog

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzDecode: whatever bytes a catalog file holds, decoding neither panics
// nor accepts invalid JSON, and the snapshot's queries work on whatever was
// decoded.
func FuzzDecode(f *testing.F) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	e := Entry{Topic: "telemetry", Partition: 0, FirstOffset: 0, LastOffset: 9, Objects: []Object{{
		Key: "telemetry/cpu/run=r1/date=2026-11-29/x.parquet", Kind: "telemetry", Measurement: "cpu", Run: "r1",
		MinTime: t0, MaxTime: t0.Add(time.Second), Rows: 10, Bytes: 100, Columns: []string{"time"}}}}
	good, _ := json.Marshal(e)
	snap, _ := json.Marshal(snapFile{Topic: "telemetry", Entries: []Entry{e, e}})
	f.Add(0, good)
	f.Add(1, snap)
	f.Add(2, []byte(`{"id":"x","replaced":["telemetry/cpu/run=r1/date=2026-11-29/x.parquet"],"objects":[{"key":"b","kind":"telemetry"}]}`))
	f.Add(3, []byte(`{"run":"r1","state":"completed"}`))
	f.Add(4, []byte(`{"id":"1","keys":["telemetry/cpu/run=r1/date=2026-11-29/x.parquet"]}`))
	f.Add(0, []byte(`{"topic":"t","partition":-1}`))
	f.Add(1, []byte(`{"entries":[null]}`))
	f.Add(0, []byte(`[]`))
	keys := []string{
		flushPrefix + "t/0/00000000000000000000-00000000000000000009.json",
		snapPrefix + "t/0/00000000000000000000-00000000000000000009.json",
		compactPrefix + "1.json",
		runsPrefix + "r1.json",
		expirePrefix + "1.json",
	}
	f.Fuzz(func(t *testing.T, kind int, data []byte) {
		if kind < 0 || kind >= len(keys) {
			return
		}
		b := newBuilder()
		b.decode(flushPrefix+"t/0/00000000000000000000-00000000000000000009.json", good)
		err := b.decode(keys[kind], data)
		if err == nil && !json.Valid(data) {
			t.Fatalf("invalid JSON %q accepted as %s", data, keys[kind])
		}
		s := b.build()
		s.Objects(Filter{Run: "r1", From: t0})
		s.Runs()
		s.Measurements()
		if _, _, ok := parseRange(keys[kind]); !ok && kind < 2 {
			t.Fatalf("parseRange rejects %s", keys[kind])
		}
		parseRange(string(data))
	})
}
