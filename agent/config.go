package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent/spool"
	"github.com/simtel/simtel/internal/lineproto"
)

// Config configures a node agent. Zero values take the documented
// defaults; Validate (called by New) fills them in.
type Config struct {
	// Brokers are the Kafka bootstrap addresses. Required.
	Brokers []string
	// ClientOpts are added to every Kafka client of the agent (the
	// producer, the policy subscribers and publisher): the connection's
	// TLS and SASL (internal/kafkasec).
	ClientOpts []kgo.Opt
	// Topic receives one record per sample. Default "telemetry".
	Topic string

	// Listeners; an empty address disables one.
	ListenUDP    string // line protocol datagrams, e.g. 127.0.0.1:8089
	ListenTCP    string // newline-separated line protocol, e.g. 127.0.0.1:8094
	ListenUnix   string // stream unix socket path
	ListenHTTP   string // /write, /api/v2/write, /ping, /query, /metrics; e.g. 127.0.0.1:8186
	ListenStatsD string // StatsD datagrams, e.g. 127.0.0.1:8125

	// HTTPTLSCert and HTTPTLSKey, PEM files, make the HTTP listener serve
	// HTTPS (TLS 1.2+) only; both or neither. HTTPTokenFile holds the
	// tokens HTTP requests must carry, one a line (httpauth.go); empty:
	// none required. The files are read again when they change (checked
	// every HTTPReloadInterval, default 10s) and on Reload.
	HTTPTLSCert, HTTPTLSKey string
	HTTPTokenFile           string
	HTTPReloadInterval      time.Duration

	// SpoolDir holds accepted samples until the broker acknowledges them.
	// Required.
	SpoolDir string
	// SpoolMaxBytes bounds the spool on disk. Default 1 GiB.
	SpoolMaxBytes int64
	// SpoolPolicy is what happens when the spool is full: "block" (default:
	// TCP, unix and HTTP senders wait; UDP datagrams are dropped and
	// counted) or "drop-oldest" (the oldest unsent samples are dropped and
	// counted).
	SpoolPolicy string
	// SpoolSync is the spool's sync tick (spool.Config.SyncInterval). Default 1s.
	SpoolSync time.Duration

	// Tags added to samples that do not carry them (the sender's win).
	Tags lineproto.DefaultTags

	// RunFromTag names the tag whose value becomes the run of a sample
	// that carries it and no run tag (runfrom.go): Slurm's profiler sends
	// job=<id> and no run, and its samples belong to the job's run, not to
	// the agent's. Such samples also get Slurm's special step ids by name
	// (step=-5 becomes step=batch). Default "job"; RunFromTagOff keeps
	// the agent's run and every tag as sent.
	RunFromTag string

	// Policies this node keeps the newest version of, in PolicyDir
	// (default /dev/shm/simtel/policy: shared memory for the node's
	// workers). PolicyKeep versions stay on disk (default 3).
	Policies   []string
	PolicyDir  string
	PolicyKeep int
	// PolicyTrustedKeys is a PEM file of ed25519 public keys; when set, a
	// policy version must be signed by one of them (learner publish
	// --sign-key) to be installed.
	PolicyTrustedKeys string

	// GossipListen enables the rollout pool (host:port, TCP and UDP);
	// GossipJoin lists other agents' gossip addresses. The pool is named
	// after the run, so agents of different runs do not mix. GossipFast
	// uses short timers (tests).
	GossipListen string
	GossipJoin   []string
	GossipFast   bool

	// PolicyRelayListen enables the peer relay (relay.go): the agent
	// serves the policy chunks it holds to the other agents of its gossip
	// pool on this host:port, and fetches new versions' chunks from them
	// before the brokers. It needs GossipListen and PolicyRelayKey, a
	// file holding the pool's shared secret (at least 16 bytes).
	// PolicyRelaySeeds nodes per version fetch from the brokers at once
	// (default 2); the others wait up to PolicyRelayWait × (1 +
	// rank/nodes) for a peer to hold it (default 10s).
	PolicyRelayListen string
	PolicyRelayKey    string
	PolicyRelaySeeds  int
	PolicyRelayWait   time.Duration

	// JobUID is SLURM_JOB_UID, which helps the collector find the job's
	// cgroup when several slurmd share a host.
	JobUID string

	// CollectInterval is how often node metrics are collected; 0 uses 10s,
	// negative disables the collector.
	CollectInterval time.Duration

	// MaxLineBytes bounds one line; MaxBodyBytes one HTTP body (after
	// decompression). Defaults 64 KiB and 32 MiB.
	MaxLineBytes int
	MaxBodyBytes int64

	// FieldTypesMemory bounds, in bytes, the agent's memory of the field
	// types it accepted per run and measurement, against which a line
	// giving a field another type is refused (fieldtypes.go). A field
	// counts as its measurement and key plus 48 bytes; when full, the run
	// checked least recently is forgotten. Default 4 MiB (some 40,000
	// fields); negative turns the check off.
	FieldTypesMemory int64

	// PacketGather is how long, at most, UDP and StatsD datagrams may wait
	// in the kernel's receive buffer once the agent has read what was
	// there, so that one wake-up spools many datagrams (the wait is cut
	// short to keep the buffer a quarter full at most at the current
	// rate). Default 1s; negative reads every datagram at once.
	PacketGather time.Duration

	// Linger is how long samples gather in the spool while few arrive
	// (fewer than 16,384 per Linger) before they are sent in one go;
	// BatchMaxBytes bounds a record batch after compression (a spool read
	// takes up to twice as much before). Defaults 1s, 1 MiB: larger
	// batches and fewer sends cost the node less CPU per sample.
	Linger        time.Duration
	BatchMaxBytes int32

	// ShutdownTimeout bounds how long Run waits, after its context ends,
	// for spooled samples to reach the broker. Default 10s. What is not
	// sent stays in the spool for the next start.
	ShutdownTimeout time.Duration

	// ReleaseExecPages makes Run give back, once it serves, the pages of
	// the executable that only start-up needed (read-only, unmodified
	// mappings; see agent/tune and docs/agent-cost.md). For a process that
	// runs the agent alone (simtel agent); off by default, so an embedding
	// process (simtel dev, tests) keeps its pages.
	ReleaseExecPages bool

	// MonitorSlack is the timer slack Run gives the Go runtime's monitor
	// thread (agent/tune); 0 leaves it alone. Like ReleaseExecPages,
	// for a process that runs the agent alone; 0 by default.
	MonitorSlack time.Duration

	// MaxProcs, if above 0, makes Run use one Go processor (GOMAXPROCS)
	// while samples arrive slowly and up to MaxProcs when they arrive fast
	// (agent/tune). GOMAXPROCS is the whole process's, so 0 (the default)
	// leaves it alone, for embedding processes.
	MaxProcs int

	Logger *slog.Logger
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if len(c.Brokers) == 0 {
		return errors.New("no brokers: pass --brokers host:port[,host:port]")
	}
	if c.SpoolDir == "" {
		return errors.New("no spool directory: pass --spool-dir DIR (accepted samples wait there while the broker is away)")
	}
	if c.Topic == "" {
		c.Topic = "telemetry"
	}
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = 1 << 30
	}
	switch c.SpoolPolicy {
	case "", "block", "drop-oldest":
	default:
		return fmt.Errorf("spool policy %q is not block or drop-oldest", c.SpoolPolicy)
	}
	if c.SpoolSync == 0 {
		c.SpoolSync = time.Second
	}
	if c.PolicyDir == "" {
		c.PolicyDir = "/dev/shm/simtel/policy"
	}
	if c.PolicyKeep <= 0 {
		c.PolicyKeep = 3
	}
	if c.PolicyRelayListen != "" {
		switch {
		case c.GossipListen == "":
			return errors.New("--policy-relay-listen needs --gossip-listen: peers find each other's relays through the gossip pool")
		case c.PolicyRelayKey == "":
			return errors.New("--policy-relay-listen needs --policy-relay-key FILE, the pool's shared secret")
		case c.PolicyRelaySeeds < 0:
			return fmt.Errorf("policy relay seeds %d is negative", c.PolicyRelaySeeds)
		case c.PolicyRelayWait < 0:
			return fmt.Errorf("policy relay wait %v is negative", c.PolicyRelayWait)
		}
		if c.PolicyRelaySeeds == 0 {
			c.PolicyRelaySeeds = 2
		}
		if c.PolicyRelayWait == 0 {
			c.PolicyRelayWait = 10 * time.Second
		}
	}
	if c.CollectInterval == 0 {
		c.CollectInterval = 10 * time.Second
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = 64 << 10
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 32 << 20
	}
	if c.FieldTypesMemory == 0 {
		c.FieldTypesMemory = 4 << 20
	}
	if c.PacketGather == 0 {
		c.PacketGather = time.Second
	}
	if c.Linger == 0 {
		c.Linger = time.Second
	}
	if c.BatchMaxBytes <= 0 {
		c.BatchMaxBytes = 1 << 20
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if (c.HTTPTLSCert == "") != (c.HTTPTLSKey == "") {
		return errors.New("HTTPS needs both --http-tls-cert and --http-tls-key")
	}
	if c.HTTPReloadInterval <= 0 {
		c.HTTPReloadInterval = 10 * time.Second
	}
	if c.RunFromTag == "" {
		c.RunFromTag = "job"
	}
	if _, err := newRunFromTag(c.RunFromTag); err != nil {
		return err
	}
	if c.ListenUDP == "" && c.ListenTCP == "" && c.ListenUnix == "" && c.ListenHTTP == "" && c.ListenStatsD == "" {
		return errors.New("no listener: pass at least one of --listen-udp, --listen-tcp, --listen-unix, --listen-http, --listen-statsd")
	}
	return c.Tags.Validate()
}

func (c *Config) spoolPolicy() spool.Policy {
	if c.SpoolPolicy == "drop-oldest" {
		return spool.DropOldest
	}
	return spool.Block
}

// TagsFromEnv derives the default tags the way DESIGN.md describes:
// host from SLURMD_NODENAME or the hostname, job from SLURM_JOB_ID, step
// from SLURM_STEP_ID, run from run (flag), SIMTEL_RUN, or the job id.
func TagsFromEnv(run string, getenv func(string) string) lineproto.DefaultTags {
	if getenv == nil {
		getenv = os.Getenv
	}
	t := lineproto.DefaultTags{
		Host: getenv("SLURMD_NODENAME"),
		Job:  getenv("SLURM_JOB_ID"),
		Step: getenv("SLURM_STEP_ID"),
		Run:  run,
	}
	if t.Host == "" {
		t.Host, _ = os.Hostname()
		t.Host, _, _ = strings.Cut(t.Host, ".")
	}
	if t.Run == "" {
		t.Run = getenv("SIMTEL_RUN")
	}
	if t.Run == "" {
		t.Run = t.Job
	}
	return t
}
