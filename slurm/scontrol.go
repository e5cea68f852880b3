package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// JobInfo is what `scontrol show job -o <id>` says about a job.
type JobInfo struct {
	Fields map[string]string // every Key=Value of the line

	JobID     string
	Name      string
	User      string // UserId without the (uid)
	State     string // JobState: RUNNING, COMPLETING, COMPLETED, CANCELLED, FAILED, …
	Reason    string
	ExitCode  string // "exit:signal"
	Nodes     []string
	BatchHost string
	Comment   string
	Submit    time.Time
	Start     time.Time
	End       time.Time
}

// ParseJobInfo parses one line of `scontrol show job -o`. Values may hold
// spaces (a job name): a value runs until the next " Key=" whose key is
// made of letters, digits and the characters _/:.
func ParseJobInfo(line string, loc *time.Location) (JobInfo, error) {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "JobId=") {
		return JobInfo{}, fmt.Errorf("scontrol output does not start with JobId=: %.80q", line)
	}
	if loc == nil {
		loc = time.Local
	}
	f := map[string]string{}
	starts := keyStarts(line)
	for i, s := range starts {
		end := len(line)
		if i+1 < len(starts) {
			end = starts[i+1] - 1
		}
		k, v, _ := strings.Cut(line[s:end], "=")
		f[k] = v
	}
	ji := JobInfo{
		Fields:    f,
		JobID:     f["JobId"],
		Name:      f["JobName"],
		State:     f["JobState"],
		Reason:    f["Reason"],
		ExitCode:  f["ExitCode"],
		BatchHost: nullable(f["BatchHost"]),
		Comment:   nullable(f["Comment"]),
	}
	ji.User, _, _ = strings.Cut(f["UserId"], "(")
	if nl := nullable(f["NodeList"]); nl != "" {
		nodes, err := ExpandHostlist(nl)
		if err != nil {
			return JobInfo{}, fmt.Errorf("scontrol NodeList: %w", err)
		}
		ji.Nodes = nodes
	}
	ji.Submit = parseTime(f["SubmitTime"], loc)
	ji.Start = parseTime(f["StartTime"], loc)
	ji.End = parseTime(f["EndTime"], loc)
	return ji, nil
}

// keyStarts finds where each Key= begins: at the start or after a space.
func keyStarts(line string) []int {
	var out []int
	for i := 0; i < len(line); i++ {
		if i > 0 && line[i-1] != ' ' {
			continue
		}
		j := i
		for j < len(line) && isKeyChar(line[j]) {
			j++
		}
		if j > i && j < len(line) && line[j] == '=' && line[i] >= 'A' && line[i] <= 'Z' {
			out = append(out, i)
			i = j
		}
	}
	return out
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '/' || c == ':'
}

func nullable(s string) string {
	if s == "(null)" || s == "None" || s == "N/A" {
		return ""
	}
	return s
}

func parseTime(s string, loc *time.Location) time.Time {
	t, err := time.ParseInLocation("2006-01-02T15:04:05", s, loc)
	if err != nil {
		return time.Time{} // Unknown, None, N/A
	}
	return t
}

// ShowJob runs `scontrol show job -o <id>`; scontrol is looked up in PATH
// unless bin is set.
func ShowJob(ctx context.Context, bin, jobID string) (JobInfo, error) {
	if bin == "" {
		bin = "scontrol"
	}
	bin = lookPath(bin)
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "show", "job", "-o", jobID)
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return JobInfo{}, fmt.Errorf("cannot show job %s with %s: %w: %s", jobID, bin, err, strings.TrimSpace(errb.String()))
	}
	line, _, _ := strings.Cut(out.String(), "\n")
	return ParseJobInfo(line, nil)
}

// lookPath finds bin in PATH and, since slurmd runs hooks with an empty
// environment, in the usual system directories.
func lookPath(bin string) string {
	if strings.Contains(bin, "/") {
		return bin
	}
	if p, err := exec.LookPath(bin); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/opt/slurm/bin"} {
		p := dir + "/" + bin
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return bin
}
