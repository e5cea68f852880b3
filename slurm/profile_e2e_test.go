package slurm_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
)

// The measurements of Slurm 22.05's acct_gather_profile/influxdb for
// --profile=task, one line per task and sample, every value a float.
var profileMeasurements = []string{"CPUFrequency", "CPUTime", "CPUUtilization", "Pages", "RSS", "ReadMB", "VMSize", "WriteMB"}

// TestSlurmProfile runs a job with --profile=task on the test cluster,
// whose acct_gather.conf points Slurm's InfluxDB profiler at a node-wide
// agent (scripts/slurm-up.sh). The agent runs with a run of its own, as
// from systemd: the job's profile must still land in the lake under
// run=<job id>, one row per line the profiler sent, with the batch step
// named, and `simtel lake runs` must list the job with the profile's
// measurements.
func TestSlurmProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Slurm jobs")
	}
	cl := needCluster(t)
	addr := profilerAddr(t, cl)
	// The run ends as the job does, and the profiler's last lines may
	// arrive at the sink after that flush: a short flush age brings them.
	p := startPipeline(t, cl, "2s")

	// The agent must be the one the profiler reaches, not a leftover.
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Fatalf("the profiler's address %s is taken: %v", addr, err)
	} else {
		ln.Close()
	}
	agentDir := filepath.Join(p.dir, "node-agent")
	agent := testutil.Start(t, p.dir, "agent", "--brokers", p.broker, "--spool-dir", filepath.Join(agentDir, "spool"),
		"--policy-dir", filepath.Join(agentDir, "policy"), "--listen-http", addr, "--listen-udp", "", "--listen-tcp", "",
		"--collect-interval=-1s", "--run", "node-agent")
	testutil.WaitPort(t, addr, agent)

	jdir := filepath.Join(p.dir, "profiled")
	os.MkdirAll(jdir, 0o755)
	// Two tasks on two nodes keep a CPU busy for 4 s each: the profiler
	// samples every second (JobAcctGatherFrequency=task=1).
	burn := `end=$(($(date +%s) + 4)); while [ "$(date +%s)" -lt "$end" ]; do :; done`
	cmd := exec.Command("sbatch", "--parsable", "--profile=task", "--nodes", "2", "--ntasks-per-node", "1", "--job-name", "e2e-profile",
		"--output", filepath.Join(jdir, "job.out"), "--wrap", "srun sh -c '"+burn+"'")
	cmd.Dir = jdir
	id := sbatch(t, cmd)
	t.Logf("job %s submitted with --profile=task", id)
	j := job{id: id, dir: jdir}
	if st := waitJob(t, id); st != "COMPLETED" {
		t.Fatalf("job %s ended %s, want COMPLETED; output:\n%s", id, st, jobOutput(j))
	}

	// What the profiler sent, counted by the agent: every line it received
	// over HTTP took its run from the job tag, none was refused, and every
	// request was answered 204.
	metricsURL := "http://" + addr + "/metrics"
	var sent float64
	testutil.WaitFor(t, 60*time.Second, "the agent has sent the profiler's samples to the broker", func() error {
		m := scrape(t, metricsURL)
		sent = m[`simtel_agent_samples_run_from_tag_total{listener="http"}`]
		if sent == 0 || m["simtel_agent_spool_pending_samples"] > 0 || m["simtel_agent_samples_sent_total"] < sent {
			return fmt.Errorf("%v lines from the profiler, %v pending, %v sent", sent, m["simtel_agent_spool_pending_samples"], m["simtel_agent_samples_sent_total"])
		}
		return nil
	})
	m := scrape(t, metricsURL)
	if recv := m[`simtel_agent_samples_received_total{listener="http"}`]; recv != sent || m[`simtel_agent_parse_errors_total{listener="http"}`] != 0 {
		t.Fatalf("agent received %v lines over HTTP, %v with their run from the job tag, %v malformed; want all from the tag",
			recv, sent, m[`simtel_agent_parse_errors_total{listener="http"}`])
	}
	for k, v := range m {
		if strings.HasPrefix(k, "simtel_agent_http_requests_total{") && !strings.Contains(k, `code="204"`) && v > 0 {
			t.Errorf("agent answered the profiler %s: %v", k, v)
		}
	}
	t.Logf("agent: %v lines from Slurm's profiler for job %s", sent, id)

	// The lake holds exactly those lines under run=<job id>.
	var rows map[string]int
	var total int
	testutil.WaitFor(t, 120*time.Second, fmt.Sprintf("the lake holds the %v profile rows of run %s", sent, id), func() error {
		if rows, total = profileRows(t, p, id); total != int(sent) {
			return fmt.Errorf("%d rows %v", total, rows)
		}
		return nil
	})
	t.Logf("lake: %d rows under run=%s %v, the agent sent %v lines", total, id, rows, sent)
	for _, meas := range profileMeasurements {
		if rows[meas] == 0 {
			t.Errorf("no %s rows under run %s: %v", meas, id, rows)
		}
	}

	// Steps by name: the batch script's samples are step=batch, the srun
	// step's step=0, and no raw negative ids remain.
	steps := lakeQuery(t, p, "", fmt.Sprintf("SELECT DISTINCT step FROM CPUTime WHERE run = '%s' ORDER BY step", id))
	if !slices.Equal(steps, []string{"0", "batch"}) {
		t.Errorf("steps of run %s: %q, want [0 batch]", id, steps)
	}
	// Nothing went to the agent's own run.
	if n := lakeQuery(t, p, "", "SELECT count(*) FROM RSS WHERE run <> '"+id+"'"); !slices.Equal(n, []string{"0"}) {
		t.Errorf("RSS rows outside run %s: %v", id, n)
	}
	// --run selects the job's profile, as for any run; the query of
	// docs/slurm-profiling.md that keeps InfluxDB's point identity (the last of
	// samples with the same tags and time) keeps one row per task and
	// second, and so does its CPU and RSS per task.
	all := lakeQuery(t, p, id, "SELECT count(*), count(DISTINCT (time, step, task, host)) FROM RSS")
	last := lakeQuery(t, p, id, lastRSS("count(*)", ""))
	if len(all) != 1 || len(last) != 1 || strings.Split(all[0], ",")[0] != strconv.Itoa(rows["RSS"]) || strings.Split(all[0], ",")[1] != last[0] {
		t.Fatalf("RSS of run %s: count and distinct identities %q, last write wins %q; want %d rows", id, all, last, rows["RSS"])
	}
	t.Logf("RSS of run %s: rows, distinct (time, step, task, host): %s; last write wins: %s", id, all, last)
	if perTask := lakeQuery(t, p, id, cpuRSSQuery); strconv.Itoa(len(perTask)) != last[0] {
		t.Errorf("docs/slurm-profiling.md's CPU and RSS per task: %d rows, want %s:\n%s", len(perTask), last[0], strings.Join(perTask, "\n"))
	} else {
		t.Logf("CPU and RSS per task: %d rows, first %q", len(perTask), perTask[0])
	}

	// simtel lake runs lists the job with the profile's measurements.
	type lakeRun struct {
		Run, State   string
		Measurements []string
		Rows         int64
	}
	var runs []lakeRun
	testutil.WaitFor(t, 60*time.Second, "simtel lake runs lists run "+id+" as completed", func() error {
		out, err := exec.Command(p.bin, "lake", "runs", "--lake", p.lake, "--format", "json").Output()
		if err != nil || json.Unmarshal(out, &runs) != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		if !slices.ContainsFunc(runs, func(r lakeRun) bool { return r.Run == id && r.State == "completed" }) {
			return fmt.Errorf("%s", out)
		}
		return nil
	})
	want := []lakeRun{{Run: id, State: "completed", Measurements: profileMeasurements, Rows: int64(total)}}
	if !reflect.DeepEqual(runs, want) {
		t.Errorf("simtel lake runs: %+v, want only %+v", runs, want)
	}

	// A second RSS sample of a task at the time of one it sent: the lake
	// has both rows, the last-write-wins query only the second.
	first := lakeQuery(t, p, id, "SELECT CAST(epoch(time) AS BIGINT), step, task, host FROM RSS ORDER BY time, step, task LIMIT 1")
	f := strings.Split(first[0], ",")
	line := fmt.Sprintf("RSS,job=%s,step=%s,task=%s,host=%s value=123456789 %s\n", id, f[1], f[2], f[3], f[0])
	resp, err := http.Post("http://"+addr+"/write?db=slurm&rp=autogen&precision=s", "application/x-www-form-urlencoded", strings.NewReader(line))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("POST %q: %v %v", line, err, resp)
	}
	resp.Body.Close()
	testutil.WaitFor(t, 60*time.Second, "the lake holds the rewritten RSS sample", func() error {
		if n := lakeQuery(t, p, id, "SELECT count(*) FROM RSS"); n[0] != strconv.Itoa(rows["RSS"]+1) {
			return fmt.Errorf("%s rows", n[0])
		}
		return nil
	})
	at := fmt.Sprintf("epoch(time) = %s AND step = '%s' AND task = '%s'", f[0], f[1], f[2])
	if got := lakeQuery(t, p, id, lastRSS("count(*), CAST(max(value) AS BIGINT)", at)); !slices.Equal(got, []string{"1,123456789"}) {
		t.Errorf("last write of %s: %q, want one row with the second value", at, got)
	}
	if got := lakeQuery(t, p, id, lastRSS("count(*)", "")); !slices.Equal(got, last) {
		t.Errorf("RSS as InfluxDB keeps it after the rewrite: %q rows, want %q", got, last)
	}
}

// cpuRSSQuery is docs/slurm-profiling.md's query of a job's CPU and RSS per task.
const cpuRSSQuery = `
  WITH cpu AS (SELECT * FROM CPUUtilization
               QUALIFY row_number() OVER (PARTITION BY time, step, task, host ORDER BY _offset DESC) = 1),
       rss AS (SELECT * FROM RSS
               QUALIFY row_number() OVER (PARTITION BY time, step, task, host ORDER BY _offset DESC) = 1)
  SELECT time, step, task, host, cpu.value AS cpu_percent, rss.value / 1024 AS rss_mib
  FROM cpu JOIN rss USING (time, step, task, host)
  ORDER BY step, task, time`

// lastRSS selects cols from RSS as InfluxDB keeps it (docs/slurm-profiling.md: the
// last row of each tag set and time), with the condition where.
func lastRSS(cols, where string) string {
	if where != "" {
		where = " WHERE " + where
	}
	return "SELECT " + cols + ` FROM (SELECT * FROM RSS
  QUALIFY row_number() OVER (PARTITION BY time, step, task, host ORDER BY _offset DESC) = 1)` + where
}

// profilerAddr is the agent address the cluster's profiler sends to
// (ProfileInfluxDBHost in acct_gather.conf). A cluster set up without the
// profiler is treated as no cluster: scripts/slurm-up.sh sets it up.
func profilerAddr(t *testing.T, cl cluster) string {
	t.Helper()
	conf, _ := os.ReadFile(cl.conf)
	ag, _ := os.ReadFile(filepath.Join(cl.base, "etc", "acct_gather.conf"))
	addr := ""
	for _, l := range strings.Split(string(ag), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "ProfileInfluxDBHost="); ok {
			addr = strings.TrimPrefix(v, "http://")
		}
	}
	if addr == "" || !strings.Contains(string(conf), "AcctGatherProfileType=acct_gather_profile/influxdb") {
		msg := "the test cluster has no InfluxDB profiler: run scripts/slurm-up.sh again"
		testutil.SkipOrFail(t, msg, "")
	}
	return addr
}

// scrape reads an agent's /metrics page into series -> value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			m[l[:i]] = v
		}
	}
	io.Copy(io.Discard, resp.Body)
	return m
}

// profileRows counts the rows of each profile measurement under run id.
func profileRows(t *testing.T, p pipeline, id string) (map[string]int, int) {
	t.Helper()
	rows := map[string]int{}
	total := 0
	for _, meas := range profileMeasurements {
		out, err := exec.Command(p.bin, "lake", "query", "--lake", p.lake, "--format", "csv",
			fmt.Sprintf("SELECT count(*) FROM %s WHERE run = '%s'", meas, id)).Output()
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if n, perr := strconv.Atoi(lines[len(lines)-1]); err == nil && perr == nil {
			rows[meas] = n
			total += n
		}
	}
	return rows, total
}

// lakeQuery runs q (with --run when run is set) and returns the csv rows
// without the header.
func lakeQuery(t *testing.T, p pipeline, run, q string) []string {
	t.Helper()
	args := []string{"lake", "query", "--lake", p.lake, "--format", "csv", q}
	if run != "" {
		args = append(args, "--run", run)
	}
	out, err := exec.Command(p.bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("simtel %s: %v: %s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[1:]
}
