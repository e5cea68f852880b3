package agent

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/simtel/simtel/internal/lineproto"
)

// Slurm's own profiler (acct_gather_profile/influxdb) tags its samples
// job=<id>,step=<id>,task=<rank>,host=<node> and sends no run tag: one
// agent per node receives the samples of every job on the node. A run in
// simtel is its job's id (the run registry keys Slurm jobs by
// SLURM_JOB_ID, which is also the profiler's job tag, for array tasks and
// heterogeneous job components as well), so a line that carries the tag
// named by Config.RunFromTag and no run tag gets run=<that value>, and
// the job's profile is part of its run rather than of the agent's own.
// The same lines name Slurm's special steps as sacct does.

// RunFromTagOff turns the mapping off (Config.RunFromTag, --run-from-tag).
const RunFromTagOff = "off"

// runFromTag rewrites lines that carry the tag key and no run tag.
type runFromTag struct {
	key []byte
	// own is key's bit of lineproto.Sample.Own if key is one of the
	// default tags (job), which Normalize notes for free; for another key
	// a line without needle (",key=") cannot carry the tag. Looking for
	// needle in every line costs more than normalizing a short one.
	own    uint8
	needle []byte
}

func newRunFromTag(key string) (*runFromTag, error) {
	switch key {
	case RunFromTagOff:
		return nil, nil
	case "", "run":
		return nil, fmt.Errorf("run-from-tag %q: name a tag such as job, or %s", key, RunFromTagOff)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c == ',' || c == '=' || c == '\\' || c == 0x7f {
			return nil, fmt.Errorf("run-from-tag %q is not a plain tag key", key)
		}
	}
	own := map[string]uint8{"host": lineproto.OwnHost, "job": lineproto.OwnJob, "step": lineproto.OwnStep}[key]
	return &runFromTag{key: []byte(key), own: own, needle: []byte("," + key + "=")}, nil
}

// candidate reports whether line, whose normalized Sample has the given
// Own bits, may carry the tag and has no run tag of its own.
func (r *runFromTag) candidate(line []byte, own uint8) bool {
	switch {
	case own&lineproto.OwnRun != 0:
		return false
	case r.own != 0:
		return own&r.own != 0
	}
	return bytes.Contains(line, r.needle)
}

// slurmSteps are the step ids Slurm gives its special steps (slurm.h:
// SLURM_PENDING_STEP, SLURM_EXTERN_CONT, SLURM_BATCH_SCRIPT,
// SLURM_INTERACTIVE_STEP), which the profiler prints as signed numbers,
// and the names sacct shows for them.
var slurmSteps = map[string]string{
	"-3": "pending", "-4": "extern", "-5": "batch", "-6": "interactive",
}

func init() {
	// The same ids printed unsigned, as other Slurm versions may.
	for id, name := range slurmSteps {
		n, _ := strconv.ParseInt(id, 10, 64)
		slurmSteps[strconv.FormatUint(uint64(uint32(n)), 10)] = name
	}
}

// rewrite returns line with run=<value of the tag> added and a special
// step id replaced by its name, built in dst[:0], if line carries the tag
// and no run tag; else it returns nil. tags is scratch space, returned
// for reuse.
func (r *runFromTag) rewrite(dst, line []byte, tags []lineproto.RawTag) ([]byte, []lineproto.RawTag) {
	tags = lineproto.AppendRawTags(tags[:0], line)
	var from, step *lineproto.RawTag
	for i := range tags {
		switch t := &tags[i]; string(t.Key) {
		case "run":
			return nil, tags
		case string(r.key):
			from = t
		case "step":
			step = t
		}
	}
	if from == nil {
		return nil, tags
	}
	// ",run=<value>" goes before the first tag (Normalize sorts the
	// tags); the value is copied escaped as sent.
	at := tags[0].Start
	dst = append(dst[:0], line[:at]...)
	dst = append(dst, ",run="...)
	dst = append(dst, from.Value...)
	rest := line[at:]
	if step != nil {
		if name, ok := slurmSteps[string(step.Value)]; ok {
			vs := step.End - len(step.Value)
			dst = append(dst, line[at:vs]...)
			dst = append(dst, name...)
			rest = line[step.End:]
		}
	}
	return append(dst, rest...), tags
}
