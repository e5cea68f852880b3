package scheduler

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
func code(c int) *int    { return &c }

func TestFold(t *testing.T) {
	nodes := []string{"n1", "n2", "n10"}
	sub := Event{Type: EventSubmitted, Run: "42", JobID: "42", User: "ana", Name: "ppo", Nodes: nodes, Time: at(0)}
	start := Event{Type: EventStarted, Run: "42", JobID: "42", User: "ana", Name: "ppo", Nodes: nodes, Node: "n1", Time: at(5)}
	up := func(n string, s int) Event {
		return Event{Type: EventNodeUp, Run: "42", JobID: "42", Nodes: nodes, Node: n, Time: at(s)}
	}
	down := func(n string, s int) Event { return Event{Type: EventNodeDown, Run: "42", Node: n, Time: at(s)} }
	done := Event{Type: EventCompleted, Run: "42", JobID: "42", Node: "n1", Time: at(60), ExitCode: code(0)}
	fail := Event{Type: EventFailed, Run: "42", JobID: "42", Node: "n1", Time: at(61), ExitCode: code(3), Reason: "NonZeroExitCode"}
	cancel := Event{Type: EventCancelled, Run: "42", JobID: "42", Node: "n1", Time: at(30), ExitCode: code(0), Reason: "signal 15"}

	running := Run{Run: "42", JobID: "42", User: "ana", Name: "ppo", Nodes: []string{"n1", "n2", "n10"},
		NodesUp: []string{"n1", "n2", "n10"}, Submitted: at(0), Started: at(4), State: StateRunning}
	with := func(r Run, f func(*Run)) Run { f(&r); return r }

	tests := []struct {
		name   string
		events []Event
		want   Run
	}{
		{"nothing yet", []Event{sub}, Run{Run: "42", JobID: "42", User: "ana", Name: "ppo", Nodes: []string{"n1", "n2", "n10"}, Submitted: at(0), State: StatePending}},
		{"node up from each node", []Event{sub, up("n2", 4), up("n1", 4), start, up("n10", 6)}, running},
		{"duplicates change nothing", []Event{sub, sub, up("n2", 4), up("n2", 4), up("n1", 4), start, start, up("n10", 6), up("n10", 6)}, running},
		{"completed", []Event{sub, up("n1", 4), up("n2", 4), up("n10", 6), start, down("n2", 61), done, down("n10", 62)},
			with(running, func(r *Run) {
				r.State, r.Ended, r.ExitCode, r.NodesDown = StateCompleted, at(60), code(0), []string{"n2", "n10"}
			})},
		{"final state wins over a late start", []Event{done, start, up("n1", 4), up("n2", 4), up("n10", 6), sub},
			with(running, func(r *Run) { r.State, r.Ended, r.ExitCode = StateCompleted, at(60), code(0) })},
		{"failed with exit code", []Event{sub, up("n1", 4), up("n2", 4), up("n10", 6), fail, start},
			with(running, func(r *Run) { r.State, r.Ended, r.ExitCode, r.Reason = StateFailed, at(61), code(3), "NonZeroExitCode" })},
		{"failed beats completed", []Event{sub, up("n1", 4), up("n2", 4), up("n10", 6), fail, done},
			with(running, func(r *Run) { r.State, r.Ended, r.ExitCode, r.Reason = StateFailed, at(61), code(3), "NonZeroExitCode" })},
		{"cancelled beats both", []Event{done, sub, cancel, up("n1", 4), up("n2", 4), up("n10", 6), fail},
			with(running, func(r *Run) { r.State, r.Ended, r.ExitCode, r.Reason = StateCancelled, at(30), code(0), "signal 15" })},
		{"jobcomp beats the epilog's guess", []Event{sub, up("n1", 4), up("n2", 4), up("n10", 6),
			{Type: EventCompleted, Run: "42", Node: "n1", Time: at(31), ExitCode: code(0), Source: SourceEpilog},
			{Type: EventCancelled, Run: "42", JobID: "42", Time: at(30), ExitCode: code(0), Reason: "CANCELLED", Source: SourceJobComp}},
			with(running, func(r *Run) {
				r.State, r.Ended, r.ExitCode, r.Reason, r.Source = StateCancelled, at(30), code(0), "CANCELLED", SourceJobComp
				r.NodesDown = []string{"n1"}
			})},
		{"jobcomp failed beats an epilog cancel", []Event{sub, up("n1", 4), up("n2", 4), up("n10", 6),
			{Type: EventCancelled, Run: "42", Node: "n1", Time: at(31), ExitCode: code(137), Reason: "signal 9", Source: SourceEpilog},
			{Type: EventFailed, Run: "42", Time: at(30), ExitCode: code(137), Reason: "OUT_OF_MEMORY", Source: SourceJobComp}},
			with(running, func(r *Run) {
				r.State, r.Ended, r.ExitCode, r.Reason, r.Source = StateFailed, at(30), code(137), "OUT_OF_MEMORY", SourceJobComp
				r.NodesDown = []string{"n1"}
			})},
		{"ended without any start event", []Event{done}, Run{Run: "42", JobID: "42", State: StateCompleted, Ended: at(60), ExitCode: code(0)}},
		{"node_down alone is pending", []Event{down("n1", 3)}, Run{Run: "42", State: StatePending, NodesDown: []string{"n1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Fold(tc.events)
			if len(got) != 1 {
				t.Fatalf("got %d runs, want 1", len(got))
			}
			if !reflect.DeepEqual(got[0], tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got[0], tc.want)
			}
			// Any order, any duplication: the same Run.
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.events))))
			for i := 0; i < 200; i++ {
				evs := append([]Event(nil), tc.events...)
				for j := rng.IntN(3); j > 0; j-- {
					evs = append(evs, evs[rng.IntN(len(evs))])
				}
				rng.Shuffle(len(evs), func(a, b int) { evs[a], evs[b] = evs[b], evs[a] })
				if g := Fold(evs); !reflect.DeepEqual(g[0], tc.want) {
					t.Fatalf("order %v:\ngot  %+v\nwant %+v", types(evs), g[0], tc.want)
				}
			}
		})
	}
}

func types(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type+"@"+e.Node)
	}
	return out
}

// TestMergeIsAJoin checks the properties the cache relies on: merging
// partial folds in any grouping gives the fold of all events.
func TestMergeIsAJoin(t *testing.T) {
	kinds := []string{EventSubmitted, EventStarted, EventNodeUp, EventNodeDown, EventCompleted, EventFailed, EventCancelled}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 2000; i++ {
		var evs []Event
		for j := rng.IntN(8) + 1; j > 0; j-- {
			e := Event{Type: kinds[rng.IntN(len(kinds))], Run: "r", Node: []string{"n1", "n2", "n3"}[rng.IntN(3)], Time: at(rng.IntN(5))}
			if rng.IntN(2) == 0 {
				e.ExitCode = code(rng.IntN(3))
			}
			if rng.IntN(3) == 0 {
				e.Source = []string{SourceEpilog, SourceJobComp, "cli"}[rng.IntN(3)]
			}
			if rng.IntN(3) == 0 {
				e.JobID = []string{"1", "2"}[rng.IntN(2)]
			}
			evs = append(evs, e)
		}
		whole := Fold(evs)[0]
		cut := rng.IntN(len(evs) + 1)
		a, b := Run{Run: "r"}, Run{Run: "r"}
		for _, e := range evs[:cut] {
			a = Apply(a, e)
		}
		for _, e := range evs[cut:] {
			b = Apply(b, e)
		}
		if ab, ba := Merge(a, b), Merge(b, a); !reflect.DeepEqual(ab, whole) || !reflect.DeepEqual(ba, whole) {
			t.Fatalf("events %v cut %d:\nmerge(a,b) %+v\nmerge(b,a) %+v\nfold       %+v", types(evs), cut, ab, ba, whole)
		}
		if aa := Merge(a, a); !reflect.DeepEqual(aa, Merge(Run{Run: "r"}, a)) {
			t.Fatalf("merge not idempotent: %+v vs %+v", aa, a)
		}
	}
}

func TestAllNodesDown(t *testing.T) {
	nodes := []string{"n1", "n2", "n10"}
	evs := []Event{
		{Type: EventNodeUp, Run: "1", Nodes: nodes, Node: "n1", Time: at(0)},
		{Type: EventCancelled, Run: "1", Time: at(5), Source: SourceJobComp},
		{Type: EventNodeDown, Run: "1", Node: "n2", Time: at(6)},
		{Type: EventNodeDown, Run: "1", Node: "n10", Time: at(6)},
	}
	if r := Fold(evs)[0]; r.AllNodesDown() {
		t.Fatalf("all nodes down before n1's epilog: %+v", r)
	}
	evs = append(evs, Event{Type: EventCancelled, Run: "1", Node: "n1", Time: at(7), Source: SourceEpilog})
	if r := Fold(evs)[0]; !r.AllNodesDown() || r.Source != SourceJobComp {
		t.Fatalf("got %+v, want all nodes down and the jobcomp outcome", r)
	}
}

func TestFoldSeparatesRuns(t *testing.T) {
	got := Fold([]Event{
		{Type: EventStarted, Run: "run-10", Time: at(1)},
		{Type: EventStarted, Run: "run-9", Time: at(1)},
		{Type: EventCompleted, Run: "run-9", Time: at(2)},
		{Type: EventStarted, Run: "", Time: at(1)}, // no run: ignored
	})
	if len(got) != 2 || got[0].Run != "run-9" || got[1].Run != "run-10" {
		t.Fatalf("got %+v, want run-9 then run-10", got)
	}
	if got[0].State != StateCompleted || got[1].State != StateRunning {
		t.Fatalf("states %s %s, want completed running", got[0].State, got[1].State)
	}
	if d := got[0].Duration(); d != time.Second {
		t.Fatalf("duration %v, want 1s", d)
	}
}

func TestDecodeEvent(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{`{"type":"started","run":"1","time":"2026-11-29T12:00:00Z"}`, ""},
		{`{"type":"exploded","run":"1","time":"2026-11-29T12:00:00Z"}`, `invalid job event: event type "exploded" is not one of submitted, started, node_up, node_down, completed, failed, cancelled`},
		{`{"type":"started","time":"2026-11-29T12:00:00Z"}`, "invalid job event: event has no run id"},
		{`{"type":"started","run":"1"}`, "invalid job event: event has no time"},
		{`{"type":"started","run":"a\u0000b","time":"2026-11-29T12:00:00Z"}`, `invalid job event: run id "a\x00b" contains a control character`},
		{`not json`, "job event is not valid JSON: invalid character 'o' in literal null (expecting 'u')"},
	} {
		_, err := DecodeEvent([]byte(tc.in))
		if (err == nil && tc.err != "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("DecodeEvent(%s): got error %v, want %q", tc.in, err, tc.err)
		}
	}
}

func TestRunJSON(t *testing.T) {
	r := Run{Run: "7", JobID: "7", Nodes: []string{"n1"}, Started: at(1), State: StateRunning}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"run":"7","job_id":"7","nodes":["n1"],"started":"2026-11-29T12:00:01Z","state":"running"}`
	if string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	back, err := DecodeRun(b)
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: got %+v %v, want %+v", back, err, r)
	}
	if _, err := DecodeRun([]byte(`{"run":"7","state":"weird"}`)); err == nil {
		t.Fatal("DecodeRun accepted an unknown state")
	}
}

func TestNaturalCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"n2", "n10", -1}, {"n10", "n2", 1}, {"n1", "n1", 0}, {"gpu-01", "gpu-2", -1},
		{"n01", "n1", -1}, {"a", "a1", -1}, {"run-9", "run-10", -1}, {"x", "", 1},
	} {
		if got := NaturalCompare(tc.a, tc.b); got != tc.want {
			t.Errorf("NaturalCompare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// FuzzDecodeEvent: any record value decodes to a valid event or an error,
// and a decoded event folds into a Run that survives a JSON round trip.
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range []string{
		`{"type":"started","run":"1","time":"2026-11-29T12:00:00Z"}`,
		`{"type":"failed","run":"1","job_id":"1","nodes":["n1","n2"],"node":"n1","time":"2026-11-29T12:00:00Z","exit_code":3,"reason":"x","source":"epilog"}`,
		`{"type":"node_up","run":"r","time":"0001-01-01T00:00:00Z"}`,
		`{"type":"cancelled","run":"\u0007","time":"2026-11-29T12:00:00Z"}`,
		`[]`, `null`, `{"exit_code":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEvent(b)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded an invalid event: %v", err)
		}
		r := Apply(Run{Run: e.Run}, e)
		if !reflect.DeepEqual(Merge(r, r), r) {
			t.Fatalf("merge not idempotent on %+v", r)
		}
		out, err := json.Marshal(r)
		if err != nil {
			return // a time outside years 0-9999 cannot be written as JSON
		}
		back, err := DecodeRun(out)
		if err != nil {
			t.Fatalf("run %s does not decode: %v", out, err)
		}
		if !runEqual(back, r) {
			t.Fatalf("round trip: %+v != %+v", back, r)
		}
	})
}

// FuzzDecodeRun: any runs-topic value decodes or errors, never panics, and
// merging it with itself changes nothing.
func FuzzDecodeRun(f *testing.F) {
	for _, s := range []string{
		`{"run":"7","job_id":"7","nodes":["n1"],"started":"2026-11-29T12:00:01Z","state":"running"}`,
		`{"run":"7","state":"failed","exit_code":3,"nodes_down":["n2","n1"]}`,
		`{"run":"","state":"running"}`, `{}`, `7`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRun(b)
		if err != nil {
			return
		}
		m := Merge(Run{Run: r.Run}, r)
		if !reflect.DeepEqual(Merge(m, m), m) {
			t.Fatalf("merge not idempotent on %+v", m)
		}
	})
}
