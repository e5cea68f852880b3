package slurm

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Env is what the SLURM_* variables of a job, a step, a prolog or an
// epilog say. Fields a context does not set stay empty (-1 for numbers).
type Env struct {
	JobID    string   // SLURM_JOB_ID (or the older SLURM_JOBID)
	StepID   string   // SLURM_STEP_ID (SLURM_STEPID)
	ProcID   int      // SLURM_PROCID: the task's global rank, -1 if unset
	NodeID   int      // SLURM_NODEID: the node's index in the job, -1 if unset
	LocalID  int      // SLURM_LOCALID: the task's index on its node, -1 if unset
	JobName  string   // SLURM_JOB_NAME (not set for prologs and epilogs)
	User     string   // SLURM_JOB_USER, else USER
	UID      string   // SLURM_JOB_UID
	NodeName string   // SLURMD_NODENAME: this node's Slurm name
	Nodelist string   // SLURM_JOB_NODELIST (or SLURM_NODELIST), unexpanded
	Nodes    []string // Nodelist expanded
	Context  string   // SLURM_SCRIPT_CONTEXT: prolog_slurmd, epilog_slurmd, …
	// ExitCode2 is SLURM_JOB_EXIT_CODE2 ("exit:signal"), set for epilogs.
	ExitCode2 string
}

// ParseEnv reads the SLURM_* variables through getenv (os.Getenv when
// nil). It fails only on a malformed number or nodelist.
func ParseEnv(getenv func(string) string) (Env, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	first := func(keys ...string) string {
		for _, k := range keys {
			if v := strings.TrimSpace(getenv(k)); v != "" {
				return v
			}
		}
		return ""
	}
	e := Env{
		JobID:     first("SLURM_JOB_ID", "SLURM_JOBID"),
		StepID:    first("SLURM_STEP_ID", "SLURM_STEPID"),
		JobName:   first("SLURM_JOB_NAME"),
		User:      first("SLURM_JOB_USER", "USER"),
		UID:       first("SLURM_JOB_UID"),
		NodeName:  first("SLURMD_NODENAME"),
		Nodelist:  first("SLURM_JOB_NODELIST", "SLURM_NODELIST"),
		Context:   first("SLURM_SCRIPT_CONTEXT"),
		ExitCode2: first("SLURM_JOB_EXIT_CODE2"),
	}
	var err error
	for _, f := range []struct {
		key string
		dst *int
	}{{"SLURM_PROCID", &e.ProcID}, {"SLURM_NODEID", &e.NodeID}, {"SLURM_LOCALID", &e.LocalID}} {
		*f.dst = -1
		if v := strings.TrimSpace(getenv(f.key)); v != "" {
			n, perr := strconv.Atoi(v)
			if perr != nil || n < 0 {
				return Env{}, fmt.Errorf("%s=%q is not a non-negative integer", f.key, v)
			}
			*f.dst = n
		}
	}
	if e.Nodelist != "" {
		if e.Nodes, err = ExpandHostlist(e.Nodelist); err != nil {
			return Env{}, fmt.Errorf("SLURM_JOB_NODELIST: %w", err)
		}
	}
	return e, nil
}

// ParseExitCode parses Slurm's "exit:signal" form (ExitCode=3:0,
// SLURM_JOB_EXIT_CODE2=0:15).
func ParseExitCode(s string) (exit, signal int, err error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return 0, 0, fmt.Errorf("exit code %q is not exit:signal", s)
	}
	exit, err1 := strconv.Atoi(a)
	signal, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || exit < 0 || signal < 0 {
		return 0, 0, fmt.Errorf("exit code %q is not exit:signal", s)
	}
	return exit, signal, nil
}
