package catalog

import (
	"iter"
	"sort"
	"time"

	"github.com/simtel/simtel/lake"
)

// Snapshot is the catalog as Load read it. It does not change; Load again
// to see later flushes.
type Snapshot struct {
	// Entries holds every committed flush once, sorted by topic,
	// partition and first offset. Their Objects lists are as written: use
	// Objects for what is visible after compactions.
	Entries []Entry
	// Compactions applied, oldest first.
	Compactions []Compaction
	// Skipped holds compactions not applied because an older one already
	// replaced one of their objects (two compactors raced); their new
	// objects are invisible garbage.
	Skipped []Compaction
	// Expirations applied, oldest first, each with the keys it hides
	// (Expiration.Hidden).
	Expirations []Expiration
	// RunStates by run name, for runs marked complete.
	RunStates map[string]RunState
	// FieldTypes holds the fixed type of every field seen so far, by
	// measurement then field (see FieldType). Objects of a lake written
	// before types were fixed may hold a field in other types too.
	FieldTypes map[string]map[string]string
	// Problems lists catalog files that could not be read and were skipped.
	Problems []string

	objects []visibleObject // sorted by key
}

// Filter selects objects; zero fields match everything.
type Filter struct {
	Kind        string // lake.KindTelemetry, KindRaw or KindDeadLetter
	Topic       string
	Measurement string
	Run         string // lake.NoValue matches objects without a run
	// From and To bound sample time to [From, To): an object is kept when
	// its [MinTime, MaxTime] overlaps the range.
	From, To time.Time
}

func (f Filter) match(v *visibleObject) bool {
	switch {
	case f.Kind != "" && v.Kind != f.Kind:
		return false
	case f.Measurement != "" && v.Measurement != f.Measurement:
		return false
	case f.Run != "" && runName(v.Run) != f.Run:
		return false
	case !f.From.IsZero() && v.MaxTime.Before(f.From):
		return false
	case !f.To.IsZero() && !v.MinTime.Before(f.To):
		return false
	}
	if f.Topic != "" {
		for _, t := range v.topics {
			if t == f.Topic {
				return true
			}
		}
		return false
	}
	return true
}

func runName(r string) string {
	if r == "" {
		return lake.NoValue
	}
	return r
}

// Objects returns the visible objects that match f, sorted by key.
// Objects replaced by a compaction are not visible; the compaction's
// objects are.
func (s *Snapshot) Objects(f Filter) []Object {
	var out []Object
	for i := range s.objects {
		if f.match(&s.objects[i]) {
			out = append(out, s.objects[i].Object)
		}
	}
	return out
}

// Written yields every object the catalog says was written, visible or
// not: each flush's objects in entry order, then the objects of the
// applied compactions and of the skipped ones, oldest first. A key
// yielded twice describes the same object again.
func (s *Snapshot) Written() iter.Seq[Object] {
	return func(yield func(Object) bool) {
		for _, e := range s.Entries {
			for _, o := range e.Objects {
				if !yield(o) {
					return
				}
			}
		}
		for _, cps := range [][]Compaction{s.Compactions, s.Skipped} {
			for _, cp := range cps {
				for _, o := range cp.Objects {
					if !yield(o) {
						return
					}
				}
			}
		}
	}
}

// RunInfo summarises one run's data in the lake.
type RunInfo struct {
	Run string `json:"run"` // lake.NoValue for samples without a run tag
	// State is the marked state (completed, failed, cancelled) or "open"
	// while the run has not been marked.
	State        string    `json:"state"`
	ExitCode     int       `json:"exit_code,omitempty"`
	Ended        time.Time `json:"ended,omitzero"`
	From         time.Time `json:"from,omitzero"` // first sample
	To           time.Time `json:"to,omitzero"`   // last sample
	Measurements []string  `json:"measurements"`
	Rows         int64     `json:"rows"`
	Objects      int64     `json:"objects"`
	Bytes        int64     `json:"bytes"`
}

// StateOpen is the state of a run that has data but no RunState yet.
const StateOpen = "open"

// Runs summarises every run that has telemetry in the lake or a recorded
// state, sorted by first sample time (runs without data last) then name.
func (s *Snapshot) Runs() []RunInfo {
	byRun := map[string]*RunInfo{}
	get := func(run string) *RunInfo {
		ri, ok := byRun[run]
		if !ok {
			ri = &RunInfo{Run: run, State: StateOpen}
			byRun[run] = ri
		}
		return ri
	}
	for i := range s.objects {
		o := &s.objects[i]
		if o.Kind != lake.KindTelemetry && o.Run == "" {
			continue
		}
		ri := get(runName(o.Run))
		if !o.MinTime.IsZero() && (ri.From.IsZero() || o.MinTime.Before(ri.From)) {
			ri.From = o.MinTime
		}
		if o.MaxTime.After(ri.To) {
			ri.To = o.MaxTime
		}
		if o.Measurement != "" {
			ri.Measurements = appendUnique(ri.Measurements, o.Measurement)
		}
		ri.Rows += o.Rows
		ri.Objects++
		ri.Bytes += o.Bytes
	}
	for run, rs := range s.RunStates {
		ri := get(run)
		ri.State, ri.ExitCode, ri.Ended = rs.State, rs.ExitCode, rs.Ended
	}
	out := make([]RunInfo, 0, len(byRun))
	for _, ri := range byRun {
		sort.Strings(ri.Measurements)
		if ri.Measurements == nil {
			ri.Measurements = []string{}
		}
		out = append(out, *ri)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.From.IsZero() != b.From.IsZero() {
			return !a.From.IsZero()
		}
		if !a.From.Equal(b.From) {
			return a.From.Before(b.From)
		}
		return a.Run < b.Run
	})
	return out
}

// MeasurementInfo summarises one measurement's telemetry in the lake.
type MeasurementInfo struct {
	Name    string    `json:"name"`
	Runs    []string  `json:"runs"`
	Columns []string  `json:"columns"` // union over its objects, sorted
	From    time.Time `json:"from,omitzero"`
	To      time.Time `json:"to,omitzero"`
	Rows    int64     `json:"rows"`
	Objects int64     `json:"objects"`
	Bytes   int64     `json:"bytes"`
}

// Measurements summarises every measurement with visible telemetry objects,
// sorted by name.
func (s *Snapshot) Measurements() []MeasurementInfo {
	byName := map[string]*MeasurementInfo{}
	for i := range s.objects {
		o := &s.objects[i]
		if o.Kind != lake.KindTelemetry {
			continue
		}
		mi, ok := byName[o.Measurement]
		if !ok {
			mi = &MeasurementInfo{Name: o.Measurement}
			byName[o.Measurement] = mi
		}
		mi.Runs = appendUnique(mi.Runs, runName(o.Run))
		for _, c := range o.Columns {
			mi.Columns = appendUnique(mi.Columns, c)
		}
		if !o.MinTime.IsZero() && (mi.From.IsZero() || o.MinTime.Before(mi.From)) {
			mi.From = o.MinTime
		}
		if o.MaxTime.After(mi.To) {
			mi.To = o.MaxTime
		}
		mi.Rows += o.Rows
		mi.Objects++
		mi.Bytes += o.Bytes
	}
	out := make([]MeasurementInfo, 0, len(byName))
	for _, mi := range byName {
		sort.Strings(mi.Runs)
		sort.Strings(mi.Columns)
		out = append(out, *mi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
