package collector

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/simtel/simtel/internal/lineproto"
)

// Config configures a Collector. The zero value collects node metrics from
// /proc with no Slurm job and the nvidia-smi found on PATH.
type Config struct {
	// ProcRoot is where procfs is mounted. Default "/proc". Tests point it at
	// a copy of captured files.
	ProcRoot string

	// SysRoot is where sysfs is mounted. Default "/sys". cgroup v1 and v2
	// hierarchies are looked for under SysRoot/fs/cgroup; block device
	// attributes under SysRoot/class/block.
	SysRoot string

	// JobID is the Slurm job id (SLURM_JOB_ID). When set, the job's cgroup
	// CPU and memory are reported as measurement slurm_job. Default "" (off).
	JobID string

	// UID is the job owner's numeric uid (SLURM_JOB_UID), if known. cgroup v1
	// paths of Slurm include uid_<uid>/job_<id>; when several job_<id>
	// directories are found, the one under uid_<UID> wins. Default "".
	UID string

	// NvidiaSMI is the path or name (looked up in PATH) of nvidia-smi.
	// Default "nvidia-smi". When it cannot be found GPUs are skipped with one
	// debug log line.
	NvidiaSMI string

	// GPUTimeout bounds one run of nvidia-smi. Default 2s.
	GPUTimeout time.Duration

	// Interfaces, when non-empty, lists the only network interfaces reported
	// (by name, as in /proc/net/dev); listing "lo" reports the loopback.
	// Default: every interface but "lo" that has moved a packet since boot.
	Interfaces []string

	// Devices, when non-empty, lists the only block devices reported (by
	// name, as in /proc/diskstats). Default: whole disks that have done I/O
	// since boot; partitions and loop, ram, zram and floppy devices are
	// skipped.
	Devices []string

	// Logger receives debug lines about skipped sources. Default: discard.
	Logger *slog.Logger

	// Now returns the time stamped on samples and used for rates. Default
	// time.Now.
	Now func() time.Time
}

// Validate reports whether the fields that come from users or the
// environment are well formed: JobID and UID must be decimal numbers.
func (cfg *Config) Validate() error {
	if cfg.JobID != "" && !isDecimal(cfg.JobID) {
		return fmt.Errorf("collector: job id %q is not a decimal number", cfg.JobID)
	}
	if cfg.UID != "" && !isDecimal(cfg.UID) {
		return fmt.Errorf("collector: uid %q is not a decimal number", cfg.UID)
	}
	if cfg.GPUTimeout < 0 {
		return fmt.Errorf("collector: negative gpu timeout %v", cfg.GPUTimeout)
	}
	return nil
}

func isDecimal(s string) bool {
	_, ok := parseUint([]byte(s))
	return ok
}

// source names a file or program a measurement is read from. Each source
// logs its first failure once and stays quiet until it has worked again.
type source int

const (
	srcStat source = iota
	srcMeminfo
	srcLoadavg
	srcUptime
	srcNetDev
	srcDiskstats
	srcSlurm
	srcGPU
	srcEncode
	numSources
)

var sourceNames = [numSources]string{"stat", "meminfo", "loadavg", "uptime", "net/dev", "diskstats", "slurm_job", "gpu", "encode"}

// Collector reads node metrics and encodes them as line protocol. It keeps
// the previous call's counters to report rates. Its methods are safe for
// concurrent use, but calls are serialized.
type Collector struct {
	cfg Config
	log *slog.Logger

	// Paths built once in New so Collect does no string work per call.
	statPath, meminfoPath, loadavgPath, uptimePath, netDevPath, diskstatsPath string

	mu struct {
		sync.Mutex

		enc       lineproto.Encoder
		lineStart int    // offset of the line being encoded
		nfields   int    // fields added to the line being encoded
		encFailed bool   // the encoder refused a line during this Collect
		buf       []byte // file contents, reused

		failing [numSources]bool

		// last is the time of the previous Collect, zero before the first.
		last time.Time

		cpu  cpuState
		mem  meminfo
		net  netState
		disk diskState
		job  jobState
		gpu  gpuState
	}
}

// New returns a Collector for cfg, filling in defaults. It does no I/O; a
// misconfigured source shows up as a debug log line from Collect.
func New(cfg Config) *Collector {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.NvidiaSMI == "" {
		cfg.NvidiaSMI = "nvidia-smi"
	}
	if cfg.GPUTimeout <= 0 {
		cfg.GPUTimeout = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Collector{
		cfg:           cfg,
		log:           log,
		statPath:      filepath.Join(cfg.ProcRoot, "stat"),
		meminfoPath:   filepath.Join(cfg.ProcRoot, "meminfo"),
		loadavgPath:   filepath.Join(cfg.ProcRoot, "loadavg"),
		uptimePath:    filepath.Join(cfg.ProcRoot, "uptime"),
		netDevPath:    filepath.Join(cfg.ProcRoot, "net", "dev"),
		diskstatsPath: filepath.Join(cfg.ProcRoot, "diskstats"),
	}
	c.mu.buf = make([]byte, 0, 16<<10)
	c.mu.net.init(cfg.Interfaces)
	c.mu.disk.init(cfg.Devices, filepath.Join(cfg.SysRoot, "class", "block"))
	c.mu.job.init(cfg)
	return c
}

// Collect appends one line-protocol line per metric group to dst and returns
// the extended slice. Every line carries the same timestamp, Config.Now() at
// the start of the call, in nanoseconds.
//
// Rates (CPU percentages, bytes per second, job CPU percent) compare with the
// previous call; the first call after New reports totals only. A source that
// cannot be read (missing file, no job cgroup, no nvidia-smi) is skipped with
// one debug log line and does not fail the call. Collect returns an error
// only when ctx is done; dst then holds the lines encoded so far.
func (c *Collector) Collect(ctx context.Context, dst []byte) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return dst, fmt.Errorf("collector: collect node metrics: %w", err)
	}

	now := c.cfg.Now()
	var dt float64 // seconds since the previous call; 0 means no rates
	if !c.mu.last.IsZero() {
		if d := now.Sub(c.mu.last).Seconds(); d > 0 {
			dt = d
		}
	}
	c.mu.last = now

	enc := &c.mu.enc
	enc.SetBuffer(dst)

	nCPU := c.collectStatLocked(now)
	c.collectMemLocked(now)
	c.collectSystemLocked(now, nCPU)
	collectDevicesLocked(c, &c.mu.net.deviceTable, &netKind, c.netDevPath, now, dt)
	collectDevicesLocked(c, &c.mu.disk.deviceTable, &diskKind, c.diskstatsPath, now, dt)
	if err := ctx.Err(); err != nil {
		return c.finishLocked(), fmt.Errorf("collector: collect node metrics: %w", err)
	}
	if c.cfg.JobID != "" {
		c.collectJobLocked(now)
	}
	c.collectGPULocked(ctx, now)
	out := c.finishLocked()
	if err := ctx.Err(); err != nil {
		return out, fmt.Errorf("collector: collect node metrics: %w", err)
	}
	return out, nil
}

// finishLocked takes the encoded bytes back from the encoder.
func (c *Collector) finishLocked() []byte {
	if !c.mu.encFailed {
		c.okLocked(srcEncode)
	}
	c.mu.encFailed = false
	out := c.mu.enc.Bytes()
	c.mu.enc.SetBuffer(nil) // do not keep the caller's buffer alive
	return out
}

// beginLocked starts a line of measurement m.
func (c *Collector) beginLocked(m string) {
	c.mu.lineStart = len(c.mu.enc.Bytes())
	c.mu.nfields = 0
	c.mu.enc.StartLine(m)
}

// endLocked ends the line with timestamp t. A line without fields (every
// value was NaN or missing) or one the encoder refused is removed whole, so
// the output never holds a partial or empty line.
func (c *Collector) endLocked(t time.Time) {
	enc := &c.mu.enc
	if c.mu.nfields > 0 {
		enc.EndLine(t.UnixNano())
	}
	err := enc.Err()
	if err == nil && c.mu.nfields > 0 {
		return
	}
	if err != nil {
		c.mu.encFailed = true
		c.failLocked(srcEncode, err)
	}
	b := enc.Bytes()
	if len(b) > c.mu.lineStart {
		b = b[:c.mu.lineStart]
	}
	enc.SetBuffer(b) // also clears the error and the encoder's line state
}

// failLocked logs the first failure of src; later failures stay quiet until
// the source has worked again.
func (c *Collector) failLocked(src source, err error) {
	if c.mu.failing[src] {
		return
	}
	c.mu.failing[src] = true
	c.log.Debug("collector source skipped", "source", sourceNames[src], "err", err)
}

func (c *Collector) okLocked(src source) {
	c.mu.failing[src] = false
}

// readSourceLocked reads the file at path and hands it to parse, noting
// whether src worked (failLocked, okLocked). It reports whether both the
// read and parse succeeded.
func (c *Collector) readSourceLocked(src source, path string, parse func(b []byte) error) bool {
	b, err := c.readLocked(path)
	if err == nil {
		err = parse(b)
	}
	if err != nil {
		c.failLocked(src, err)
		return false
	}
	c.okLocked(src)
	return true
}

// readLocked reads the whole file at path into the shared buffer. The result
// is valid until the next readLocked.
func (c *Collector) readLocked(path string) ([]byte, error) {
	b, err := readFileInto(c.mu.buf[:0], path)
	c.mu.buf = b[:0]
	return b, err
}

// Field helpers. The encoder keeps the first error and drops the offending
// line; finishLocked logs it.

func (c *Collector) addInt(key string, v int64) {
	c.mu.nfields++
	c.mu.enc.AddInt(key, v)
}

// addUint encodes v as an integer field (Telegraf and InfluxDB 1.x readers
// expect "i"), saturating at MaxInt64.
func (c *Collector) addUint(key string, v uint64) {
	if v > math.MaxInt64 {
		v = math.MaxInt64
	}
	c.mu.nfields++
	c.mu.enc.AddInt(key, int64(v))
}

// addFloat encodes v, leaving out NaN and infinities, which line protocol
// cannot carry.
func (c *Collector) addFloat(key string, v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		c.mu.nfields++
		c.mu.enc.AddFloat(key, v)
	}
}

// tagValue turns s into a string line protocol can carry as a tag value:
// valid UTF-8, no control characters, no trailing backslash, not empty.
// Spaces, commas and equals signs are left alone: the encoder escapes them.
func tagValue(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		s = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f {
				return '_'
			}
			return r
		}, s)
	}
	if strings.HasSuffix(s, `\`) {
		s = s[:len(s)-1] + "_"
	}
	if s == "" {
		s = "_"
	}
	return s
}

// cpuName returns "cpu<id>", cached.
func cpuName(names *[]string, id int) string {
	for len(*names) <= id {
		*names = append(*names, "cpu"+strconv.Itoa(len(*names)))
	}
	return (*names)[id]
}
