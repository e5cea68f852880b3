package scheduler

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode"
)

// Run states.
const (
	StatePending   = "pending"
	StateRunning   = "running"
	StateCompleted = "completed"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Run is one entry of the run registry: what the events of a run say
// about it. It is the value of a record on RunsTopic (key = run), a cache
// of the fold of the run's events on JobsTopic, which stay the source of
// truth.
type Run struct {
	Run     string   `json:"run"`
	JobID   string   `json:"job_id,omitempty"`
	User    string   `json:"user,omitempty"`
	Name    string   `json:"name,omitempty"`
	Nodes   []string `json:"nodes,omitempty"`    // the job's nodes, sorted
	NodesUp []string `json:"nodes_up,omitempty"` // nodes whose prolog reported, sorted
	// NodesDown are the nodes whose epilog reported, sorted: their
	// processes, the agent included, are gone, so their samples are in
	// the broker. See AllNodesDown.
	NodesDown []string  `json:"nodes_down,omitempty"`
	Submitted time.Time `json:"submitted,omitzero"`
	Started   time.Time `json:"started,omitzero"`
	Ended     time.Time `json:"ended,omitzero"`
	State     string    `json:"state"`               // one of the State* constants
	ExitCode  *int      `json:"exit_code,omitempty"` // from the final event
	Reason    string    `json:"reason,omitempty"`    // from the final event
	Source    string    `json:"source,omitempty"`    // reporter of the final event
}

// Duration is how long the run ran: Ended-Started, or 0 while either is
// unknown.
func (r Run) Duration() time.Duration {
	if r.Started.IsZero() || r.Ended.IsZero() || r.Ended.Before(r.Started) {
		return 0
	}
	return r.Ended.Sub(r.Started)
}

// AllNodesDown reports whether the run has ended and every node of the
// job has run its epilog: every agent of the run has exited and shipped
// what it could, so a consumer can close the run's data. A final event
// alone does not say that: the controller's (jobcomp) comes first, while
// the nodes are still stopping.
func (r Run) AllNodesDown() bool {
	if !r.Final() || len(r.Nodes) == 0 {
		return false
	}
	for _, n := range r.Nodes {
		if _, ok := slices.BinarySearchFunc(r.NodesDown, n, NaturalCompare); !ok {
			return false
		}
	}
	return true
}

// Final reports whether the run has ended.
func (r Run) Final() bool {
	return r.State == StateCompleted || r.State == StateFailed || r.State == StateCancelled
}

// The fold of a run's events must give the same Run whatever order the
// events arrive in and however often each arrives: prologs and epilogs on
// different nodes publish concurrently, producers retry, and the cache on
// RunsTopic may be rebuilt from any subset. So Merge is a join: it is
// commutative, associative and idempotent, and every field is combined by
// a rule with those properties:
//
//   - Submitted and Started: the earliest time seen (node_up counts as a
//     start: the run holds its nodes).
//   - Nodes and NodesUp: the union.
//   - JobID, User, Name: any non-empty value; should two events disagree,
//     the smaller string, so the result does not depend on order.
//   - the final outcome (State when final, Ended, ExitCode, Reason,
//     Source) comes from the strongest final event: first by the
//     authority of its source (jobcomp, then any other, then epilog), then
//     cancelled beats failed beats completed (a run an equal reporter saw
//     cancelled or failing did not complete); between equals, a known exit
//     code beats none, a larger exit code beats a smaller one, then the
//     earlier end, then the smaller reason.
//   - a final state wins over running and pending, whatever arrived last.

// stateRank orders states for Merge: higher wins.
func stateRank(s string) int {
	switch s {
	case StateCancelled:
		return 5
	case StateFailed:
		return 4
	case StateCompleted:
		return 3
	case StateRunning:
		return 2
	case StatePending:
		return 1
	}
	return 0
}

// Merge joins two folds of the same run (see the rules above). Runs with
// different ids are not merged: a is returned unchanged.
func Merge(a, b Run) Run {
	if a.Run == "" {
		a.Run = b.Run
	}
	if b.Run != "" && a.Run != b.Run {
		return a
	}
	out := Run{
		Run:       a.Run,
		JobID:     pick(a.JobID, b.JobID),
		User:      pick(a.User, b.User),
		Name:      pick(a.Name, b.Name),
		Nodes:     union(a.Nodes, b.Nodes),
		NodesUp:   union(a.NodesUp, b.NodesUp),
		NodesDown: union(a.NodesDown, b.NodesDown),
		Submitted: earliest(a.Submitted, b.Submitted),
		Started:   earliest(a.Started, b.Started),
	}
	// The stronger outcome carries its own end, exit code and reason.
	win := a
	if outcomeLess(a, b) {
		win = b
	}
	out.State, out.Ended, out.ExitCode, out.Reason, out.Source = win.State, win.Ended, copyInt(win.ExitCode), win.Reason, win.Source
	if !out.Final() {
		// Not ended: the state follows from what is known of the start.
		out.Ended, out.ExitCode, out.Reason, out.Source = time.Time{}, nil, "", ""
		out.State = StatePending
		if !out.Started.IsZero() || len(out.NodesUp) > 0 || a.State == StateRunning || b.State == StateRunning {
			out.State = StateRunning
		}
	}
	return out
}

// outcomeLess reports whether a's outcome is weaker than b's.
func outcomeLess(a, b Run) bool {
	if a.Final() != b.Final() {
		return b.Final()
	}
	if !a.Final() {
		return false // re-derived by Merge
	}
	if sa, sb := sourceRank(a.Source), sourceRank(b.Source); sa != sb {
		return sa < sb
	}
	if ra, rb := stateRank(a.State), stateRank(b.State); ra != rb {
		return ra < rb
	}
	if (a.ExitCode == nil) != (b.ExitCode == nil) {
		return a.ExitCode == nil
	}
	if a.ExitCode != nil && *a.ExitCode != *b.ExitCode {
		return *a.ExitCode < *b.ExitCode
	}
	if !a.Ended.Equal(b.Ended) {
		// The earlier end is stronger; zero (unknown) is weakest.
		if a.Ended.IsZero() || b.Ended.IsZero() {
			return a.Ended.IsZero()
		}
		return b.Ended.Before(a.Ended)
	}
	if a.Reason != b.Reason {
		return a.Reason > b.Reason
	}
	return a.Source > b.Source
}

func sourceRank(s string) int {
	switch s {
	case SourceJobComp:
		return 2
	case SourceEpilog:
		return 0
	}
	return 1
}

// Apply folds one event into r. It ignores events of other runs.
func Apply(r Run, e Event) Run {
	return Merge(r, FromEvent(e))
}

// FromEvent is the Run that one event alone describes.
func FromEvent(e Event) Run {
	r := Run{Run: e.Run, JobID: e.JobID, User: e.User, Name: e.Name, Nodes: union(nil, e.Nodes), State: StatePending}
	switch e.Type {
	case EventSubmitted:
		r.Submitted = e.Time
	case EventStarted:
		r.Started, r.State = e.Time, StateRunning
	case EventNodeUp:
		r.Started, r.State = e.Time, StateRunning
		if e.Node != "" {
			r.NodesUp = []string{e.Node}
		}
	case EventNodeDown:
		// The node is done; the run's outcome comes from a final event.
		if e.Node != "" {
			r.NodesDown = []string{e.Node}
		}
	case EventCompleted, EventFailed, EventCancelled:
		r.State, r.Ended, r.ExitCode, r.Reason, r.Source = e.Type, e.Time, copyInt(e.ExitCode), e.Reason, e.Source
		if e.Source == SourceEpilog && e.Node != "" {
			r.NodesDown = []string{e.Node} // an epilog's final event: its node is done too
		}
	}
	return r
}

// Fold folds events of any runs, in any order, into one Run per run,
// sorted by run id (natural order: run 9 before run 10).
func Fold(events []Event) []Run {
	byRun := map[string]Run{}
	for _, e := range events {
		if e.Run == "" {
			continue
		}
		r, _ := runIn(byRun, e.Run)
		byRun[e.Run] = Apply(r, e)
	}
	return sortedRuns(byRun)
}

// runIn returns the run called id in m, or a Run with only that id (ok
// false) when m has none.
func runIn(m map[string]Run, id string) (r Run, ok bool) {
	if r, ok = m[id]; !ok {
		r = Run{Run: id}
	}
	return r, ok
}

func sortedRuns(m map[string]Run) []Run {
	out := make([]Run, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Run) int { return NaturalCompare(a.Run, b.Run) })
	return out
}

// Validate reports whether e can be published: a known type, a run id
// without control characters, and a time.
func (e Event) Validate() error {
	switch e.Type {
	case EventSubmitted, EventStarted, EventNodeUp, EventNodeDown, EventCompleted, EventFailed, EventCancelled:
	default:
		return fmt.Errorf("event type %q is not one of submitted, started, node_up, node_down, completed, failed, cancelled", e.Type)
	}
	if e.Run == "" {
		return errors.New("event has no run id")
	}
	if len(e.Run) > 256 {
		return fmt.Errorf("run id is %d bytes long; at most 256 are allowed", len(e.Run))
	}
	for _, c := range e.Run {
		if unicode.IsControl(c) {
			return fmt.Errorf("run id %q contains a control character", e.Run)
		}
	}
	if e.Time.IsZero() {
		return errors.New("event has no time")
	}
	return nil
}

// DecodeEvent parses and validates the JSON value of a JobsTopic record.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("job event is not valid JSON: %w", err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, fmt.Errorf("invalid job event: %w", err)
	}
	return e, nil
}

// DecodeRun parses the JSON value of a RunsTopic record.
func DecodeRun(b []byte) (Run, error) {
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return Run{}, fmt.Errorf("run record is not valid JSON: %w", err)
	}
	if r.Run == "" {
		return Run{}, errors.New("run record has no run id")
	}
	if stateRank(r.State) == 0 {
		return Run{}, fmt.Errorf("run record %q has unknown state %q", r.Run, r.State)
	}
	return r, nil
}

func pick(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	case b < a:
		return b
	}
	return a
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case b.Before(a):
		return b
	}
	return a
}

// union returns the sorted, deduplicated union of a and b (natural order,
// so n2 sorts before n10), dropping empty names.
func union(a, b []string) []string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := make([]string, 0, len(a)+len(b))
	for _, s := range a {
		if s != "" {
			out = append(out, s)
		}
	}
	for _, s := range b {
		if s != "" {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, NaturalCompare)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

func copyInt(p *int) *int {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// NaturalCompare orders strings with embedded numbers by value:
// n2 < n10, run-9 < run-10. Equal values with different padding (n01,
// n1) fall back to plain comparison so the order is total.
func NaturalCompare(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ca, cb := a[i], b[j]
		if isDigit(ca) && isDigit(cb) {
			si, sj := i, j
			for i < len(a) && isDigit(a[i]) {
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				j++
			}
			na, nb := trimZeros(a[si:i]), trimZeros(b[sj:j])
			if len(na) != len(nb) {
				return cmp.Compare(len(na), len(nb))
			}
			if na != nb {
				return cmp.Compare(na, nb)
			}
			continue
		}
		if ca != cb {
			return cmp.Compare(ca, cb)
		}
		i++
		j++
	}
	return cmp.Or(cmp.Compare(len(a)-i, len(b)-j), cmp.Compare(a, b))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

// ExitStatus formats an exit code for tables: "" when unknown.
func ExitStatus(p *int) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(*p)
}
