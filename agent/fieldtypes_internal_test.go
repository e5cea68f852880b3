package agent

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
	"github.com/simtel/simtel/internal/testutil"
)

func newTestBatch(t *testing.T, limit int64) *ingestBatch {
	t.Helper()
	norm, err := lineproto.NewNormalizer(lineproto.DefaultTags{Host: "h", Run: "r"})
	if err != nil {
		t.Fatal(err)
	}
	return &ingestBatch{norm: norm, types: newFieldTypes(limit)}
}

// refused runs body through a fresh batch sharing b's memory and cache and
// returns the canonical lines accepted and the first conflict.
func (b *ingestBatch) run(t *testing.T, body string, now time.Time) (accepted []string, c *typeConflict) {
	t.Helper()
	b.reset()
	if e := b.add([]byte(body), lineproto.Nanosecond, now); e != nil {
		t.Fatalf("body %q: %v", body, e)
	}
	for _, sp := range b.spans {
		l := string(b.lines[sp.line:sp.lineEnd])
		accepted = append(accepted, l[:strings.IndexByte(l, ',')])
	}
	if b.conflicts > 0 && b.firstConflict == nil || b.conflicts == 0 && b.firstConflict != nil {
		t.Fatalf("body %q: %d conflicts, first %v", body, b.conflicts, b.firstConflict)
	}
	return accepted, b.firstConflict
}

// TestFieldTypeRules: the types InfluxDB tells apart are told apart, per
// run and measurement, across bodies, whether or not the batch's cache
// already knows the line's shape; a refused line teaches nothing.
func TestFieldTypeRules(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name string
		body string
		want string // measurements accepted, in order
		conf string // the first conflict's text, "" for none
	}{
		{"plain numbers are floats", "a1 v=1.5\na2 v=1\na3 v=-2e3", "a1 a2 a3", ""},
		{"integer after float", "b1 v=1.5\nb2 v=1i", "b1", `field type conflict: input field "v" on measurement "b" is type integer, already exists as type float`},
		{"unsigned after integer", "c1 v=1i\nc2 v=1u", "c1", `input field "v" on measurement "c" is type unsigned, already exists as type integer`},
		{"string after boolean", "d1 v=t\nd2 v=\"t\"\nd3 v=false", "d1 d3", `is type string, already exists as type boolean`},
		{"float after string", "e1 v=\"x\"\ne2 v=1.5", "e1", `is type float, already exists as type string`},
		{"same key in another measurement", "f1 v=1\ng1 v=1i", "f1 g1", ""},
		{"another run", "h1 v=1\nh2,run=other v=1i\nh3,run=other v=1.5", "h1 h2", `is type float, already exists as type integer`},
		{"duplicate keys in a line", "i1 v=1,v=2\ni2 w=1,w=2i\ni3 w=1i", "i1 i3", `input field "w" on measurement "i" is type integer, already exists as type float`},
		{"refused line teaches nothing", "j1 a=1\nj2 b=1i,a=1i\nj3 b=1.5", "j1 j3", `input field "a" on measurement "j" is type integer, already exists as type float`},
		{"escaped keys are one field", `k1 x\ y=1` + "\n" + `k2 x\ y=1i`, "k1", `input field "x y" on measurement "k" is type integer, already exists as type float`},
		{"cached shape then a conflict", "l1 a=1,b=1i\nl2 a=2,b=2i\nl3 a=3,b=3\nl4 a=4,b=4i", "l1 l2 l4", `input field "b" on measurement "l" is type float, already exists as type integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBatch(t, 1<<20)
			// The measurement is the line's first letter: a1 and a2 are
			// both measurement "a", tagged to tell the lines apart.
			var body []string
			for _, l := range strings.Split(tt.body, "\n") {
				name, rest, _ := strings.Cut(l, " ")
				m, tags, _ := strings.Cut(name, ",")
				if tags != "" {
					tags = "," + tags
				}
				body = append(body, fmt.Sprintf("%s%s,id=%s %s", m[:1], tags, m, rest))
			}
			b.reset()
			b.add([]byte(strings.Join(body, "\n")), lineproto.Nanosecond, now)
			var got []string
			for _, sp := range b.spans {
				l := string(b.lines[sp.line:sp.lineEnd])
				i := strings.Index(l, "id=") + 3
				got = append(got, l[i:i+strings.IndexAny(l[i:], ", ")])
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("accepted %q, want %q", g, tt.want)
			}
			conf := ""
			if b.firstConflict != nil {
				conf = b.firstConflict.Error()
			}
			if (tt.conf == "") != (conf == "") || !strings.Contains(conf, tt.conf) {
				t.Errorf("conflict %q, want %q", conf, tt.conf)
			}
			if wantN := len(body) - len(got); b.conflicts != wantN {
				t.Errorf("%d conflicts counted, want %d", b.conflicts, wantN)
			}
		})
	}
}

// TestFieldTypesAcrossBodies: the memory outlives a body and is shared by
// batches; a batch's cache never vouches for a type another batch did not
// see first.
func TestFieldTypesAcrossBodies(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	b1 := newTestBatch(t, 1<<20)
	b2 := &ingestBatch{norm: b1.norm, types: b1.types}
	if acc, c := b1.run(t, "m a=1,b=1i\nm a=2,b=2i", now); len(acc) != 2 || c != nil {
		t.Fatalf("first body: accepted %q, conflict %v", acc, c)
	}
	if acc, c := b2.run(t, "m a=1i,b=1i", now); len(acc) != 0 || c == nil || c.field != "a" {
		t.Fatalf("second batch: accepted %q, conflict %v; want a refused", acc, c)
	}
	if acc, c := b1.run(t, "m a=3,b=3i\nm a=3,b=3u", now); len(acc) != 1 || c == nil || c.field != "b" || c.got != lineproto.Unsigned {
		t.Fatalf("third body: accepted %q, conflict %v; want b refused as unsigned", acc, c)
	}
}

// TestFieldTypesMemoryIsBounded: the memory stays within its limit; when a
// new field does not fit, the run checked least recently is forgotten
// (its fields may then take other types), never the line's own run, whose
// new fields are then accepted unremembered.
func TestFieldTypesMemoryIsBounded(t *testing.T) {
	const limit = 1000
	b := newTestBatch(t, limit)
	ft := b.types
	at := func(s int64) time.Time { return time.Unix(1_800_000_000+s, 0) }
	mustAccept := func(body string, now time.Time) {
		t.Helper()
		if acc, c := b.run(t, body, now); c != nil || len(acc) != strings.Count(body, "\n")+1 {
			t.Fatalf("%q: accepted %q, conflict %v", body, acc, c)
		}
	}
	mustRefuse := func(body string, now time.Time) {
		t.Helper()
		if acc, c := b.run(t, body, now); c == nil || len(acc) != 0 {
			t.Fatalf("%q: accepted %q, want a conflict", body, acc)
		}
	}
	mustAccept("m,run=a v=1", at(1))
	mustAccept("m,run=b v=1", at(2))
	mustAccept("m,run=a w=1", at(3)) // run a is now the more recent
	gen := ft.gen.Load()
	// Run c needs room: b goes, a stays.
	var long strings.Builder
	for i := range 6 {
		fmt.Fprintf(&long, "m,run=c field_with_a_long_name_%02d=1i\n", i)
	}
	mustAccept(strings.TrimSuffix(long.String(), "\n"), at(4))
	if _, bytes := ft.stats(); bytes > limit {
		t.Fatalf("%d bytes counted, limit %d", bytes, limit)
	}
	if ft.forgottenRuns.Load() == 0 || ft.gen.Load() == gen {
		t.Fatalf("no run forgotten (forgotten %d, gen %d → %d)", ft.forgottenRuns.Load(), gen, ft.gen.Load())
	}
	mustRefuse("m,run=a v=1i", at(5))
	mustAccept("m,run=b v=1i", at(5)) // b was forgotten: a new type is taken
	mustRefuse("m,run=c field_with_a_long_name_00=1.5", at(6))
	// One run alone over the limit: its new fields are accepted unchecked
	// and counted, and the memory stays within its limit.
	long.Reset()
	for i := range 40 {
		fmt.Fprintf(&long, "m,run=d another_quite_long_field_name_%02d=1i\n", i)
	}
	mustAccept(strings.TrimSuffix(long.String(), "\n"), at(7))
	if ft.unremembered.Load() == 0 {
		t.Fatal("no field counted as unremembered")
	}
	if _, bytes := ft.stats(); bytes > limit {
		t.Fatalf("%d bytes counted, limit %d", bytes, limit)
	}
	mustAccept("m,run=d another_quite_long_field_name_39=1.5", at(8))
}

// TestRefusalLogIsRateLimited: the first refusal of a listener is logged
// at once, the next within refusalLogEvery only counted, and the count
// appears in the listener's next log line.
func TestRefusalLogIsRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf testutil.SyncBuffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		var l refusalLog
		c := &typeConflict{measurement: "m", field: "v", got: lineproto.Integer, have: lineproto.Float}
		l.note(log, "udp", 0, 1, nil, c)
		for range 5 {
			time.Sleep(time.Second)
			l.note(log, "udp", 1, 2, nil, c)
		}
		l.note(log, "tcp", 0, 1, nil, c) // another listener has its own pace
		if n := strings.Count(buf.String(), "lines refused"); n != 2 {
			t.Fatalf("%d log lines, want 2:\n%s", n, buf.String())
		}
		time.Sleep(refusalLogEvery)
		l.note(log, "udp", 0, 1, nil, c)
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("%d log lines, want 3:\n%s", len(lines), buf.String())
		}
		last := lines[2]
		for _, want := range []string{"listener=udp", "malformed=5", "field_type_conflicts=11", `conflict_example="field type conflict: input field \"v\" on measurement \"m\" is type integer, already exists as type float"`} {
			if !strings.Contains(last, want) {
				t.Errorf("log line %q lacks %s", last, want)
			}
		}
	})
}

// TestFieldTypesConcurrent: batches on several goroutines race to give
// fields their first type; for each field exactly one type is ever
// accepted, whichever comes first. With a memory too small for all runs,
// the bound holds while runs are forgotten under the same race.
func TestFieldTypesConcurrent(t *testing.T) {
	types := []string{"1.5", "1i", "1u", `"s"`, "t"}
	for _, limit := range []int64{1 << 20, 2000} {
		ft := newFieldTypes(limit)
		var mu sync.Mutex
		accepted := map[string]map[string]bool{} // run/measurement/field → value spellings accepted
		var wg sync.WaitGroup
		for g := range len(types) {
			wg.Go(func() {
				b := newTestBatch(t, 0)
				b.types = ft
				now := time.Unix(1_800_000_000, 0)
				for round := range 200 {
					var body strings.Builder
					for i := range 20 {
						// The goroutines meet on the same runs and
						// fields, each with its own type, in other orders.
						k := (round*20 + i*(g+1)) % 60
						fmt.Fprintf(&body, "m%d,run=r%d f%d=%s\n", k%3, k%7, k%5, types[g])
					}
					b.reset()
					b.add([]byte(body.String()), lineproto.Nanosecond, now.Add(time.Duration(round)*time.Second))
					mu.Lock()
					for _, sp := range b.spans {
						l := string(b.lines[sp.line:sp.lineEnd])
						meas, rest, _ := strings.Cut(l, ",")
						run := rest[strings.Index(rest, "run=")+4:]
						run = run[:strings.IndexAny(run, ", ")]
						field := strings.Fields(rest)[1]
						k, v, _ := strings.Cut(field, "=")
						key := run + "/" + meas + "/" + k
						if accepted[key] == nil {
							accepted[key] = map[string]bool{}
						}
						accepted[key][v] = true
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if _, bytes := ft.stats(); bytes > limit {
			t.Errorf("limit %d: %d bytes counted", limit, bytes)
		}
		if limit < 1<<20 {
			if ft.forgottenRuns.Load() == 0 {
				t.Errorf("limit %d: no run forgotten", limit)
			}
			continue // a forgotten run may take another type
		}
		for key, vs := range accepted {
			if len(vs) != 1 {
				t.Errorf("%s: values of %d types accepted: %v", key, len(vs), vs)
			}
		}
		if len(accepted) == 0 {
			t.Fatal("nothing accepted")
		}
	}
}
