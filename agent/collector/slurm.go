package collector

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// How a Slurm job's cgroup is found. slurmstepd puts every job in a
// directory named job_<id>:
//
//	cgroup v2: <root>/system.slice/slurmstepd.scope/job_<id>            (cpu.stat, memory.*)
//	cgroup v1: <root>/cpuacct/slurm/uid_<uid>/job_<id>                   (cpuacct.usage)
//	           <root>/memory/slurm/uid_<uid>/job_<id>                    (memory.*_in_bytes)
//
// with slurm_<node> or <node>_slurmstepd.scope in place of slurm and
// slurmstepd.scope when several slurmd share a host. The agent usually runs
// inside the job (srun), so /proc/self/cgroup names the exact directory; when
// it does not, the hierarchies are searched breadth-first for job_<id>, to a
// bounded depth, without entering other jobs' directories. The result is
// kept until a read fails; a failed search is retried after jobSearchBackoff.
const (
	jobSearchDepth    = 6     // levels below a hierarchy root
	jobSearchMaxDirs  = 20000 // directories read per hierarchy at most
	jobSearchBackoff  = 30 * time.Second
	cgroupV1Unlimited = 1 << 62 // v1 reports "no limit" as a huge page-aligned number
)

type jobState struct {
	dirName    string // job_<id>
	uidDir     string // uid_<uid>, "" when unknown
	tag        string // job tag value
	selfCgroup string // ProcRoot/self/cgroup
	root       string // SysRoot/fs/cgroup

	found      bool
	v2         string // the job's v2 directory, or ""
	cpuDir     string // the job's v1 cpuacct directory, or ""
	memDir     string // the job's v1 memory directory, or ""
	nextSearch time.Time
	files      jobFiles

	havePrev  bool
	prevUsage float64 // cpu seconds
	prevAt    time.Time
}

func (s *jobState) init(cfg Config) {
	s.dirName = "job_" + cfg.JobID
	if cfg.UID != "" {
		s.uidDir = "uid_" + cfg.UID
	}
	s.tag = tagValue(cfg.JobID)
	s.selfCgroup = filepath.Join(cfg.ProcRoot, "self", "cgroup")
	s.root = filepath.Join(cfg.SysRoot, "fs", "cgroup")
}

var errNoJobCgroup = errors.New("no cgroup directory for the job")

// locate sets the job's cgroup directories, first from /proc/self/cgroup,
// then by searching.
func (s *jobState) locate() error {
	s.v2, s.cpuDir, s.memDir = "", "", ""
	s.fromSelf()
	if s.v2 == "" && s.cpuDir == "" && s.memDir == "" {
		if v2 := s.v2Root(); v2 != "" {
			s.v2 = s.search(v2, "cpu.stat", "memory.current")
		}
		if s.v2 == "" {
			s.cpuDir = s.search(filepath.Join(s.root, "cpuacct"), "cpuacct.usage")
			s.memDir = s.search(filepath.Join(s.root, "memory"), "memory.usage_in_bytes")
		}
	}
	if s.v2 == "" && s.cpuDir == "" && s.memDir == "" {
		return fmt.Errorf("%w %s under %s", errNoJobCgroup, s.dirName, s.root)
	}
	return nil
}

// v2Root returns the unified hierarchy: the cgroup root itself on a pure v2
// system, its "unified" directory on a hybrid one.
func (s *jobState) v2Root() string {
	for _, dir := range [...]string{s.root, filepath.Join(s.root, "unified")} {
		if exists(filepath.Join(dir, "cgroup.controllers")) {
			return dir
		}
	}
	return ""
}

// fromSelf reads /proc/self/cgroup ("hierarchy-id:controllers:path" lines;
// controllers empty for v2) and keeps the paths that pass through job_<id>,
// cut after that component.
func (s *jobState) fromSelf() {
	b, err := os.ReadFile(s.selfCgroup)
	if err != nil {
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		i := strings.Index(path+"/", "/"+s.dirName+"/")
		if i < 0 {
			continue
		}
		rel := path[:i+1+len(s.dirName)]
		switch {
		case ctrls == "":
			if v2 := s.v2Root(); v2 != "" && s.v2 == "" {
				if dir := filepath.Join(v2, rel); hasAny(dir, "cpu.stat", "memory.current") {
					s.v2 = dir
				}
			}
		case hasController(ctrls, "cpuacct") && s.cpuDir == "":
			for _, mount := range [...]string{ctrls, "cpuacct", "cpu,cpuacct"} {
				if dir := filepath.Join(s.root, mount, rel); hasAny(dir, "cpuacct.usage") {
					s.cpuDir = dir
					break
				}
			}
		case hasController(ctrls, "memory") && s.memDir == "":
			if dir := filepath.Join(s.root, "memory", rel); hasAny(dir, "memory.usage_in_bytes") {
				s.memDir = dir
			}
		}
	}
	if s.v2 != "" { // v2 wins; ignore v1 leftovers
		s.cpuDir, s.memDir = "", ""
	}
}

func hasController(list, c string) bool {
	for x := range strings.SplitSeq(list, ",") {
		if x == c {
			return true
		}
	}
	return false
}

// search looks under root for a directory named job_<id> holding one of the
// files, breadth-first to jobSearchDepth. When several match (several slurmd
// on one host), the one under uid_<uid> wins, then the first in name order.
func (s *jobState) search(root string, files ...string) string {
	type dir struct {
		path  string
		depth int
	}
	queue := []dir{{root, 0}}
	var matches []string
	for n := 0; len(queue) > 0 && n < jobSearchMaxDirs; n++ {
		d := queue[0]
		queue = queue[1:]
		ents, err := os.ReadDir(d.path)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() { // also skips symlinks such as cpuacct -> cpu,cpuacct
				continue
			}
			name := e.Name()
			p := filepath.Join(d.path, name)
			if name == s.dirName {
				if hasAny(p, files...) {
					matches = append(matches, p)
				}
				continue
			}
			if strings.HasPrefix(name, "job_") || strings.HasPrefix(name, "step_") || d.depth+1 >= jobSearchDepth {
				continue
			}
			queue = append(queue, dir{p, d.depth + 1})
		}
	}
	if len(matches) == 0 {
		return ""
	}
	if s.uidDir != "" {
		for _, m := range matches {
			if filepath.Base(filepath.Dir(m)) == s.uidDir {
				return m
			}
		}
	}
	return matches[0]
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func hasAny(dir string, files ...string) bool {
	for _, f := range files {
		if exists(filepath.Join(dir, f)) {
			return true
		}
	}
	return false
}

// jobSample is one reading of the job's cgroup; has* say which were read.
type jobSample struct {
	usage             float64 // cpu seconds
	mem, peak, limit  uint64
	hasUsage, hasMem  bool
	hasPeak, hasLimit bool
}

// jobFiles are the files read each Collect, set when the cgroup is found.
type jobFiles struct {
	usage            string  // v2 cpu.stat or v1 cpuacct.usage
	usageUnit        float64 // units per second of usage: 1e6 (usage_usec) or 1e9 (ns)
	v2               bool
	mem, peak, limit string
}

func (s *jobState) setFiles() {
	f := &s.files
	*f = jobFiles{}
	if s.v2 != "" {
		f.v2 = true
		f.usage, f.usageUnit = filepath.Join(s.v2, "cpu.stat"), 1e6
		f.mem = filepath.Join(s.v2, "memory.current")
		f.peak = filepath.Join(s.v2, "memory.peak")
		f.limit = filepath.Join(s.v2, "memory.max")
		return
	}
	if s.cpuDir != "" {
		f.usage, f.usageUnit = filepath.Join(s.cpuDir, "cpuacct.usage"), 1e9
	}
	if s.memDir != "" {
		f.mem = filepath.Join(s.memDir, "memory.usage_in_bytes")
		f.peak = filepath.Join(s.memDir, "memory.max_usage_in_bytes")
		f.limit = filepath.Join(s.memDir, "memory.limit_in_bytes")
	}
}

// collectJobLocked writes the slurm_job line: cgroup v2 cpu.stat usage_usec,
// memory.current, memory.peak (Linux 5.19+) and memory.max ("max" when
// unlimited), or cgroup v1 cpuacct.usage (ns), memory.usage_in_bytes,
// memory.max_usage_in_bytes and memory.limit_in_bytes.
func (c *Collector) collectJobLocked(now time.Time) {
	s := &c.mu.job
	if !s.found {
		if now.Before(s.nextSearch) {
			return
		}
		if err := s.locate(); err != nil {
			s.nextSearch = now.Add(jobSearchBackoff)
			c.failLocked(srcSlurm, err)
			return
		}
		s.setFiles()
		s.found, s.havePrev = true, false
		c.log.Debug("collector found job cgroup", "job", c.cfg.JobID, "v2", s.v2, "cpuacct", s.cpuDir, "memory", s.memDir)
	}

	js, err := c.readJobLocked(&s.files)
	if err != nil {
		// The job ended or its cgroup moved: look again next time.
		s.found, s.havePrev = false, false
		c.failLocked(srcSlurm, err)
		return
	}
	c.okLocked(srcSlurm)

	c.beginLocked("slurm_job")
	c.mu.enc.AddTag("job", s.tag)
	if js.hasUsage {
		c.addFloat("cpu_usage_seconds", js.usage)
		if s.havePrev {
			if dt := now.Sub(s.prevAt).Seconds(); dt > 0 && js.usage >= s.prevUsage {
				c.addFloat("cpu_percent", 100*(js.usage-s.prevUsage)/dt)
			}
		}
		s.havePrev, s.prevUsage, s.prevAt = true, js.usage, now
	}
	if js.hasMem {
		c.addUint("memory_usage_bytes", js.mem)
	}
	if js.hasPeak {
		c.addUint("memory_max_bytes", js.peak)
	}
	if js.hasLimit {
		c.addUint("memory_limit_bytes", js.limit)
	}
	c.endLocked(now)
}

func (c *Collector) readJobLocked(f *jobFiles) (jobSample, error) {
	var js jobSample
	if f.v2 {
		if b, err := c.readLocked(f.usage); err == nil {
			for len(b) > 0 {
				var line []byte
				line, b = nextLine(b)
				fs := fields{line}
				if k, ok := fs.next(); ok && string(k) == "usage_usec" {
					var v uint64
					v, js.hasUsage = fs.nextUint()
					js.usage = float64(v) / f.usageUnit
					break
				}
			}
		}
	} else if f.usage != "" {
		var v uint64
		v, js.hasUsage = c.readCgroupValueLocked(f.usage)
		js.usage = float64(v) / f.usageUnit
	}
	if f.mem != "" {
		js.mem, js.hasMem = c.readCgroupValueLocked(f.mem)
		js.peak, js.hasPeak = c.readCgroupValueLocked(f.peak)
		js.limit, js.hasLimit = c.readCgroupValueLocked(f.limit)
		if !f.v2 && js.limit >= cgroupV1Unlimited {
			js.hasLimit = false
		}
	}
	if !js.hasUsage && !js.hasMem {
		return js, fmt.Errorf("%w: cannot read %q or %q", errNoJobCgroup, f.usage, f.mem)
	}
	return js, nil
}

// readCgroupValueLocked reads a one-number cgroup file. ok is false when the
// file is missing or says "max".
func (c *Collector) readCgroupValueLocked(path string) (v uint64, ok bool) {
	b, err := c.readLocked(path)
	if err != nil {
		return 0, false
	}
	line, _ := nextLine(b)
	f := fields{line}
	return f.nextUint()
}
