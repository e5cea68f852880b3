package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/scheduler"
)

// Lines as Slurm 22.05 printed them on the test cluster.
const (
	prologLine   = `JobId=8 JobName=ppo sweep UserId=ana(1000) GroupId=ana(1000) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=Prolog Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T15:31:37 EligibleTime=2026-11-29T15:31:37 AccrueTime=2026-11-29T15:31:37 StartTime=2026-11-29T15:31:38 EndTime=Unknown Deadline=N/A NodeList=n[1-2,10] BatchHost=n2 NumNodes=3 NumCPUs=3 Command=(null) WorkDir=/tmp StdErr=/tmp/pk-1.out StdIn=/dev/null StdOut=/tmp/pk-1.out Power= `
	epilogFailed = `JobId=8 JobName=ppo sweep UserId=ana(1000) GroupId=ana(1000) JobState=COMPLETING Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 SubmitTime=2026-11-29T15:31:37 StartTime=2026-11-29T15:31:38 EndTime=2026-11-29T15:31:58 NodeList=n[1-2,10] BatchHost=n2`
	epilogCancel = `JobId=8 JobName=ppo sweep UserId=ana(1000) GroupId=ana(1000) JobState=COMPLETING Reason=None Dependency=(null) ExitCode=0:15 SubmitTime=2026-11-29T15:31:37 StartTime=2026-11-29T15:31:38 EndTime=2026-11-29T15:31:41 NodeList=n[1-2,10] BatchHost=n2`
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseJobInfo(t *testing.T) {
	ji, err := ParseJobInfo(prologLine, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	if ji.JobID != "8" || ji.Name != "ppo sweep" || ji.User != "ana" || ji.State != "RUNNING" || ji.Reason != "Prolog" ||
		ji.BatchHost != "n2" || ji.ExitCode != "0:0" || ji.Fields["Power"] != "" || ji.Fields["StdErr"] != "/tmp/pk-1.out" {
		t.Fatalf("got %+v", ji)
	}
	if want := []string{"n1", "n2", "n10"}; !reflect.DeepEqual(ji.Nodes, want) {
		t.Fatalf("nodes %q, want %q", ji.Nodes, want)
	}
	if want := time.Date(2026, 11, 29, 15, 31, 37, 0, time.UTC); !ji.Submit.Equal(want) || !ji.End.IsZero() {
		t.Fatalf("submit %v end %v, want %v and zero", ji.Submit, ji.End, want)
	}
	for _, bad := range []string{"", "slurm_load_jobs error: Invalid job id specified", "JobId=1 NodeList=n[1-"} {
		if _, err := ParseJobInfo(bad, time.UTC); err == nil {
			t.Errorf("ParseJobInfo(%q) gave no error", bad)
		}
	}
}

func TestParseEnv(t *testing.T) {
	e, err := ParseEnv(env("SLURM_JOBID", "77", "SLURM_STEP_ID", "2", "SLURM_PROCID", "5", "SLURM_NODEID", "1", "SLURM_LOCALID", "0",
		"SLURM_JOB_NAME", "ppo", "SLURM_JOB_USER", "ana", "SLURMD_NODENAME", "gpu-02", "SLURM_JOB_NODELIST", "gpu-[01-02],cpu1"))
	if err != nil {
		t.Fatal(err)
	}
	want := Env{JobID: "77", StepID: "2", ProcID: 5, NodeID: 1, LocalID: 0, JobName: "ppo", User: "ana", NodeName: "gpu-02",
		Nodelist: "gpu-[01-02],cpu1", Nodes: []string{"gpu-01", "gpu-02", "cpu1"}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("got  %+v\nwant %+v", e, want)
	}
	e, err = ParseEnv(env())
	if err != nil || e.ProcID != -1 || e.NodeID != -1 || e.JobID != "" {
		t.Fatalf("empty environment: got %+v, %v", e, err)
	}
	for _, bad := range [][]string{{"SLURM_PROCID", "x"}, {"SLURM_NODEID", "-1"}, {"SLURM_JOB_NODELIST", "n[2-1]"}} {
		if _, err := ParseEnv(env(bad...)); err == nil {
			t.Errorf("ParseEnv(%v) gave no error", bad)
		}
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		state, reason, exit string
		typ                 string
		code                int // -1: nil
		why                 string
	}{
		{"COMPLETING", "None", "0:0", scheduler.EventCompleted, 0, ""},
		{"COMPLETING", "NonZeroExitCode", "3:0", scheduler.EventFailed, 3, "exit 3"},
		{"COMPLETING", "None", "0:15", scheduler.EventCancelled, 143, "signal 15"},
		{"COMPLETING", "None", "143:0", scheduler.EventCancelled, 143, "exit 143 (signal 15)"},
		{"COMPLETING", "TimeLimit", "0:15", scheduler.EventFailed, 143, "TIMEOUT"},
		{"COMPLETING", "None", "garbage", scheduler.EventFailed, -1, "exit code unknown (garbage)"},
		{"COMPLETED", "", "0:0", scheduler.EventCompleted, 0, ""},
		{"CANCELLED by 1000", "", "0:0", scheduler.EventCancelled, 0, "CANCELLED"},
		{"FAILED", "", "5:0", scheduler.EventFailed, 5, "FAILED"},
		{"OUT_OF_MEMORY", "", "0:9", scheduler.EventFailed, 137, "OUT_OF_MEMORY"},
		{"TIMEOUT", "", "0:0", scheduler.EventFailed, 0, "TIMEOUT"},
		{"NODE_FAIL", "", "0:0", scheduler.EventFailed, 0, "NODE_FAIL"},
	} {
		typ, code, why := Outcome(tc.state, tc.reason, tc.exit)
		got := -1
		if code != nil {
			got = *code
		}
		if typ != tc.typ || got != tc.code || why != tc.why {
			t.Errorf("Outcome(%q, %q, %q) = %s %d %q, want %s %d %q", tc.state, tc.reason, tc.exit, typ, got, why, tc.typ, tc.code, tc.why)
		}
	}
}

func TestPrologAndEpilogEvents(t *testing.T) {
	now := time.Date(2026, 11, 29, 16, 0, 0, 0, time.UTC)
	info, err := ParseJobInfo(prologLine, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	nodeEnv := func(node string) Env {
		e, err := ParseEnv(env("SLURM_JOB_ID", "8", "SLURM_JOB_USER", "ana", "SLURMD_NODENAME", node, "SLURM_JOB_NODELIST", "n[1-2,10]"))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	// A node that is not the batch host: node_up only.
	evs := PrologEvents(nodeEnv("n1"), &info, now)
	if len(evs) != 1 || evs[0].Type != scheduler.EventNodeUp || evs[0].Node != "n1" || evs[0].Name != "ppo sweep" || evs[0].Run != "8" {
		t.Fatalf("n1 prolog: %+v", evs)
	}
	// The batch host: submitted and started at Slurm's times too.
	evs = PrologEvents(nodeEnv("n2"), &info, now)
	if got := types(evs); !reflect.DeepEqual(got, []string{"submitted", "node_up", "started"}) {
		t.Fatalf("n2 prolog: %v", got)
	}
	if !evs[0].Time.Equal(info.Submit) || !evs[2].Time.Equal(info.Start) || !evs[1].Time.Equal(now) {
		t.Fatalf("n2 prolog times: %+v", evs)
	}
	// Without scontrol: the first node of the list leads.
	if got := types(PrologEvents(nodeEnv("n1"), nil, now)); !reflect.DeepEqual(got, []string{"node_up", "started"}) {
		t.Fatalf("n1 prolog without scontrol: %v", got)
	}

	failed, _ := ParseJobInfo(epilogFailed, time.UTC)
	if e := EpilogEvent(nodeEnv("n10"), &failed, now); e.Type != scheduler.EventNodeDown || e.Node != "n10" {
		t.Fatalf("n10 epilog: %+v", e)
	}
	e := EpilogEvent(nodeEnv("n2"), &failed, now)
	if e.Type != scheduler.EventFailed || *e.ExitCode != 3 || e.Source != scheduler.SourceEpilog || !e.Time.Equal(failed.End) {
		t.Fatalf("n2 epilog of a failed job: %+v", e)
	}
	cancelled, _ := ParseJobInfo(epilogCancel, time.UTC)
	if e := EpilogEvent(nodeEnv("n2"), &cancelled, now); e.Type != scheduler.EventCancelled || *e.ExitCode != 143 {
		t.Fatalf("n2 epilog of a cancelled job: %+v", e)
	}
	// Without scontrol the environment's exit code decides.
	en := nodeEnv("n1")
	en.ExitCode2 = "2:0"
	if e := EpilogEvent(en, nil, now); e.Type != scheduler.EventFailed || *e.ExitCode != 2 || !e.Time.Equal(now) {
		t.Fatalf("n1 epilog without scontrol: %+v", e)
	}
}

func types(evs []scheduler.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func TestJobCompEvents(t *testing.T) {
	// The environment jobcomp/script gave a cancelled job.
	evs, err := JobCompEvents(env("JOBID", "5", "JOBSTATE", "CANCELLED", "EXITCODE", "0:0", "NODES", "n[1-2]", "USERNAME", "root",
		"JOBNAME", "wrap", "SUBMIT", "1795966502", "START", "1795966505", "END", "1795966506"))
	if err != nil {
		t.Fatal(err)
	}
	if got := types(evs); !reflect.DeepEqual(got, []string{"submitted", "started", "cancelled"}) {
		t.Fatalf("got %v", got)
	}
	f := evs[2]
	if f.Source != scheduler.SourceJobComp || f.Reason != "CANCELLED" || f.Time.Unix() != 1795966506 || !reflect.DeepEqual(f.Nodes, []string{"n1", "n2"}) {
		t.Fatalf("final event %+v", f)
	}
	// Cancelled while pending: no start.
	evs, err = JobCompEvents(env("JOBID", "6", "JOBSTATE", "CANCELLED", "EXITCODE", "0:0", "NODES", "None assigned", "SUBMIT", "1795966502", "START", "0", "END", "1795966506"))
	if err != nil || !reflect.DeepEqual(types(evs), []string{"submitted", "cancelled"}) {
		t.Fatalf("pending cancel: %v %v", types(evs), err)
	}
	if _, err := JobCompEvents(env("JOBSTATE", "FAILED")); err == nil || !strings.Contains(err.Error(), "JOBID") {
		t.Fatalf("no JOBID: %v", err)
	}
}

func TestReadEnvFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "slurm.env")
	if m, err := ReadEnvFile(p); err != nil || m != nil {
		t.Fatalf("missing file: %v %v", m, err)
	}
	os.WriteFile(p, []byte("# simtel\nSIMTEL_BROKERS=\"b1:9092,b2:9092\"\n\nexport SIMTEL_TIMEOUT='3s'\n"), 0o644)
	m, err := ReadEnvFile(p)
	if err != nil || m["SIMTEL_BROKERS"] != "b1:9092,b2:9092" || m["SIMTEL_TIMEOUT"] != "3s" {
		t.Fatalf("got %v %v", m, err)
	}
	os.WriteFile(p, []byte("SIMTEL_BROKERS b1\n"), 0o644)
	if _, err := ReadEnvFile(p); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("bad line: %v", err)
	}
}

// FuzzParseJobInfo: any line gives a JobInfo or an error, never a panic.
func FuzzParseJobInfo(f *testing.F) {
	for _, s := range []string{prologLine, epilogFailed, epilogCancel, "JobId=", "JobId=1 A= B=c=d NodeList=n[1-2]", "JobId=1 JobName= X"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ji, err := ParseJobInfo(s, time.UTC)
		if err == nil && len(ji.Nodes) > MaxHosts {
			t.Fatalf("%d nodes", len(ji.Nodes))
		}
	})
}
