package slurm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/scheduler"
)

// The hooks and what Slurm 22.05 gives them (measured on the test
// cluster of scripts/slurm-up.sh):
//
//   - Prolog (slurmd, every node; with PrologFlags=Alloc at allocation,
//     before the job script starts): SLURM_JOB_ID, SLURM_JOB_USER,
//     SLURM_JOB_UID, SLURM_JOB_NODELIST, SLURMD_NODENAME,
//     SLURM_SCRIPT_CONTEXT=prolog_slurmd; no job name. `scontrol show job`
//     answers JobState=RUNNING Reason=Prolog with the job name, BatchHost
//     and submit and start times.
//   - Epilog (slurmd, every node, after the job's processes on the node
//     are gone): the same plus SLURM_JOB_EXIT_CODE2 (exit:signal), which
//     is 0:0 on every node for a cancelled job. `scontrol show job` says
//     JobState=COMPLETING whatever the outcome (the base state is hidden
//     until every epilog is done, so an epilog cannot wait for it) and
//     Reason=NonZeroExitCode for a failure; on the batch host, whose
//     epilog runs after the batch script ended, ExitCode is final (0:15
//     for a script killed by scancel's SIGTERM).
//   - jobcomp/script (slurmctld, once per job, right after the job ended):
//     JOBID, JOBSTATE (COMPLETED, CANCELLED, FAILED, TIMEOUT, NODE_FAIL,
//     OUT_OF_MEMORY, …), EXITCODE (exit:signal), NODES, USERNAME, JOBNAME,
//     SUBMIT, START, END (Unix seconds). This is the authoritative state.
//
// So every node's prolog sends node_up and the job's leader (the batch
// host, else the first node) also sends submitted and started; every
// node's epilog sends node_down, the leader's a final event inferred from
// the exit code (source "epilog"); the jobcomp hook sends the final event
// with Slurm's own state (source "jobcomp"), which wins in the fold. A
// cluster that cannot use jobcomp/script (only one JobCompType is
// allowed) still gets completed and failed right from the epilog, and
// cancelled when the script died of a signal or exited with 128+signal.

// HookConfig configures the prolog, epilog and jobcomp hooks.
type HookConfig struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// ClientOpts are extra franz-go options of the hook's client (TLS,
	// SASL).
	ClientOpts []kgo.Opt
	// Timeout bounds the whole hook. Default 5s: Slurm waits for the
	// prolog before starting the job.
	Timeout time.Duration
	// Scontrol is the scontrol binary. Default "scontrol" from PATH.
	Scontrol string
	// Getenv reads the environment. Default os.Getenv.
	Getenv func(string) string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives one line per event sent and every failure.
	Logger *slog.Logger
}

// Validate fills defaults and reports the first invalid setting.
func (c *HookConfig) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers: set SIMTEL_BROKERS in /etc/simtel/slurm.env (or pass --brokers)")
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Getenv == nil {
		c.Getenv = os.Getenv
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Hook kinds.
const (
	HookProlog  = "prolog"
	HookEpilog  = "epilog"
	HookJobComp = "jobcomp"
)

// RunHook sends the events of one hook invocation and refreshes the run
// registry, within cfg.Timeout. It returns an error when an event could
// not be sent; the caller logs it and still exits 0 (a failing prolog
// would drain the node and fail the job).
func RunHook(ctx context.Context, kind string, cfg HookConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	now := cfg.Now().UTC()

	var events []scheduler.Event
	var since time.Time
	switch kind {
	case HookProlog, HookEpilog:
		env, err := ParseEnv(cfg.Getenv)
		if err != nil {
			return err
		}
		if env.JobID == "" {
			return errors.New("SLURM_JOB_ID is not set: run this from slurm.conf's Prolog= or Epilog=")
		}
		// scontrol gets a share of the time; without it the events
		// carry what the environment says.
		sctx, scancel := context.WithTimeout(ctx, cfg.Timeout/3)
		info, err := ShowJob(sctx, cfg.Scontrol, env.JobID)
		scancel()
		var ip *JobInfo
		if err != nil {
			cfg.Logger.Warn("slurm hook without job details", "hook", kind, "job", env.JobID, "err", err)
		} else {
			ip = &info
			since = info.Submit
		}
		if kind == HookProlog {
			events = PrologEvents(env, ip, now)
		} else {
			events = []scheduler.Event{EpilogEvent(env, ip, now)}
		}
	case HookJobComp:
		e, err := JobCompEvents(cfg.Getenv)
		if err != nil {
			return err
		}
		events = e
		for _, ev := range e {
			if ev.Type == scheduler.EventSubmitted {
				since = ev.Time
			}
		}
	default:
		return fmt.Errorf("unknown hook %q: want prolog, epilog or jobcomp", kind)
	}
	if !since.IsZero() {
		since = since.Add(-10 * time.Minute) // clock skew between nodes
	}

	reg, err := scheduler.Open(scheduler.Config{Brokers: cfg.Brokers, ClientOpts: cfg.ClientOpts, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	defer reg.Close()
	for _, e := range events {
		if err := reg.Publish(ctx, e); err != nil {
			return fmt.Errorf("%s of job %s on %s: %w (within %v; is a broker at %s up?)", kind, e.JobID, e.Node, err, cfg.Timeout, strings.Join(cfg.Brokers, ","))
		}
		cfg.Logger.Info("job event sent", "hook", kind, "type", e.Type, "run", e.Run, "job", e.JobID, "node", e.Node, "exit_code", scheduler.ExitStatus(e.ExitCode), "reason", e.Reason)
	}
	if len(events) > 0 {
		// The registry cache is best effort: the events are on the jobs
		// topic, which `simtel runs --source jobs` folds.
		if r, err := reg.Refresh(ctx, events[0].Run, since); err != nil {
			cfg.Logger.Warn("run registry not refreshed", "hook", kind, "run", events[0].Run, "err", err)
		} else {
			cfg.Logger.Debug("run registry refreshed", "run", r.Run, "state", r.State)
		}
	}
	return nil
}

// leader is the node that reports for the whole job: the batch host, else
// the first node of the allocation.
func leader(env Env, info *JobInfo) string {
	if info != nil && info.BatchHost != "" {
		return info.BatchHost
	}
	if info != nil && len(info.Nodes) > 0 {
		return info.Nodes[0]
	}
	if len(env.Nodes) > 0 {
		return env.Nodes[0]
	}
	return env.NodeName
}

func baseEvent(env Env, info *JobInfo) scheduler.Event {
	e := scheduler.Event{Run: env.JobID, JobID: env.JobID, User: env.User, Name: env.JobName, Nodes: env.Nodes, Node: env.NodeName}
	if e.Node == "" {
		h, _ := os.Hostname()
		e.Node, _, _ = strings.Cut(h, ".")
	}
	if info != nil {
		if info.User != "" {
			e.User = info.User
		}
		if info.Name != "" {
			e.Name = info.Name
		}
		if len(info.Nodes) > 0 && len(e.Nodes) == 0 {
			e.Nodes = info.Nodes
		}
	}
	return e
}

// PrologEvents are the events of one node's prolog: node_up, and on the
// leader also submitted and started (at Slurm's submit and start times
// when known).
func PrologEvents(env Env, info *JobInfo, now time.Time) []scheduler.Event {
	b := baseEvent(env, info)
	up := b
	up.Type, up.Time = scheduler.EventNodeUp, now
	if b.Node != leader(env, info) {
		return []scheduler.Event{up}
	}
	started := b
	started.Type, started.Time = scheduler.EventStarted, now
	if info != nil && !info.Start.IsZero() {
		started.Time = info.Start.UTC()
	}
	out := []scheduler.Event{up, started}
	if info != nil && !info.Submit.IsZero() {
		sub := b
		sub.Type, sub.Time = scheduler.EventSubmitted, info.Submit.UTC()
		out = append([]scheduler.Event{sub}, out...)
	}
	return out
}

// EpilogEvent is the event of one node's epilog: node_down, or on the
// leader the final event inferred by Outcome.
func EpilogEvent(env Env, info *JobInfo, now time.Time) scheduler.Event {
	e := baseEvent(env, info)
	e.Time = now
	if e.Node != leader(env, info) {
		e.Type = scheduler.EventNodeDown
		return e
	}
	state, reason, exit := "", "", env.ExitCode2
	if info != nil {
		state, reason = info.State, info.Reason
		if info.ExitCode != "" {
			exit = info.ExitCode // newer than the environment's
		}
		if !info.End.IsZero() {
			e.Time = info.End.UTC()
		}
	}
	e.Type, e.ExitCode, e.Reason = Outcome(state, reason, exit)
	e.Source = scheduler.SourceEpilog
	return e
}

// Outcome maps what Slurm says of an ended job to a final event type, an
// exit code (the shell's convention: 128+signal for a signal) and a
// reason. state is the JobState (COMPLETING says nothing: the exit code
// decides), reason its Reason, exit the "exit:signal" code.
func Outcome(state, reason, exit string) (typ string, code *int, why string) {
	st, _, _ := strings.Cut(strings.ToUpper(strings.TrimSpace(state)), " ") // "CANCELLED by 0"
	ex, sig, err := ParseExitCode(exit)
	if err == nil {
		c := ex
		if sig != 0 {
			c = 128 + sig
		}
		code = &c
	}
	switch st {
	case "COMPLETED":
		return scheduler.EventCompleted, code, ""
	case "CANCELLED", "PREEMPTED", "REVOKED":
		return scheduler.EventCancelled, code, st
	case "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT":
		return scheduler.EventFailed, code, st
	}
	// COMPLETING, or unknown: infer from reason and exit code.
	switch {
	case strings.EqualFold(reason, "TimeLimit"):
		return scheduler.EventFailed, code, "TIMEOUT"
	case err != nil:
		return scheduler.EventFailed, nil, "exit code unknown (" + exit + ")"
	case sig != 0:
		return scheduler.EventCancelled, code, "signal " + strconv.Itoa(sig)
	case ex == 128+2 || ex == 128+9 || ex == 128+15:
		// The script trapped the signal and exited with the shell's code.
		return scheduler.EventCancelled, code, "exit " + strconv.Itoa(ex) + " (signal " + strconv.Itoa(ex-128) + ")"
	case ex != 0:
		return scheduler.EventFailed, code, "exit " + strconv.Itoa(ex)
	}
	return scheduler.EventCompleted, code, ""
}

// JobCompEvents are the events of slurmctld's jobcomp/script call:
// submitted and started (when the job started) and the final event with
// Slurm's state, source "jobcomp".
func JobCompEvents(getenv func(string) string) ([]scheduler.Event, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	id := strings.TrimSpace(getenv("JOBID"))
	if id == "" {
		return nil, errors.New("JOBID is not set: run this as slurm.conf's JobCompLoc= with JobCompType=jobcomp/script")
	}
	b := scheduler.Event{Run: id, JobID: id, User: getenv("USERNAME"), Name: getenv("JOBNAME")}
	if nl := strings.TrimSpace(getenv("NODES")); nl != "" && nl != "(null)" && nl != "None assigned" {
		nodes, err := ExpandHostlist(nl)
		if err != nil {
			return nil, fmt.Errorf("NODES: %w", err)
		}
		b.Nodes = nodes
	}
	unix := func(k string) time.Time {
		n, err := strconv.ParseInt(strings.TrimSpace(getenv(k)), 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}
		}
		return time.Unix(n, 0).UTC()
	}
	var out []scheduler.Event
	if t := unix("SUBMIT"); !t.IsZero() {
		e := b
		e.Type, e.Time = scheduler.EventSubmitted, t
		out = append(out, e)
	}
	if t := unix("START"); !t.IsZero() {
		e := b
		e.Type, e.Time = scheduler.EventStarted, t
		out = append(out, e)
	}
	state := strings.TrimSpace(getenv("JOBSTATE"))
	if state == "" {
		return nil, errors.New("JOBSTATE is not set: run this as slurm.conf's JobCompLoc= with JobCompType=jobcomp/script")
	}
	f := b
	f.Type, f.ExitCode, f.Reason = Outcome(state, "", getenv("EXITCODE"))
	if f.Reason == "" && f.Type != scheduler.EventCompleted {
		f.Reason = state
	}
	f.Time = unix("END")
	if f.Time.IsZero() {
		f.Time = time.Now().UTC()
	}
	f.Source = scheduler.SourceJobComp
	return append(out, f), nil
}

// ReadEnvFile reads KEY=VALUE lines (blank lines and # comments ignored,
// optional "export ", values optionally in single or double quotes), the
// format of /etc/simtel/slurm.env. A missing file is not an error.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%s:%d: %q is not KEY=VALUE", path, n, line)
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", path, err)
	}
	return out, nil
}
