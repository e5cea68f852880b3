// Package scheduler keeps simtel's run registry and publishes job lifecycle
// events. Other parts (the sink, operators' tools) react to the events on
// topic "jobs" instead of polling Slurm.
package scheduler

import "time"

// Topics of the scheduler.
const (
	JobsTopic = "jobs" // lifecycle events, key = run, JSON Event values
	RunsTopic = "runs" // compacted run registry, key = run, JSON Run values
)

// Event types, in the order a job goes through them.
const (
	EventSubmitted = "submitted"
	EventStarted   = "started"
	EventNodeUp    = "node_up"
	EventCompleted = "completed"
	EventFailed    = "failed"
	EventCancelled = "cancelled"

	// EventNodeDown is sent by the epilog of every node but the one that
	// reports the job's end: this node is done with the job (its agent is
	// gone). It does not end the run.
	EventNodeDown = "node_down"
)

// Event is one job lifecycle event: the value of a record on JobsTopic,
// encoded as JSON, with the run as the record key.
type Event struct {
	Type     string    `json:"type"` // one of the Event* constants
	Run      string    `json:"run"`
	JobID    string    `json:"job_id,omitempty"`
	User     string    `json:"user,omitempty"`
	Name     string    `json:"name,omitempty"`
	Nodes    []string  `json:"nodes,omitempty"` // the job's nodes, expanded (n[1-3] → n1 n2 n3)
	Node     string    `json:"node,omitempty"`  // the node that sent the event (node_up, prolog/epilog)
	Time     time.Time `json:"time"`
	ExitCode *int      `json:"exit_code,omitempty"` // completed/failed
	Reason   string    `json:"reason,omitempty"`
	// Source names the reporter of a final event, which decides between
	// final events that disagree (see Merge): SourceJobComp (the
	// controller's job completion record, authoritative) beats any other
	// source, which beats SourceEpilog (a node's inference from the exit
	// code while the job is still completing).
	Source string `json:"source,omitempty"`
}

// Sources of final events, by authority.
const (
	SourceJobComp = "jobcomp"
	SourceEpilog  = "epilog"
)

// Final reports whether the event ends the run.
func (e Event) Final() bool {
	return e.Type == EventCompleted || e.Type == EventFailed || e.Type == EventCancelled
}
