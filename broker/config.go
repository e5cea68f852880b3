package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// The listener and SASL settings are the connection server's (package
// server); the broker's configuration names them as its own.
type (
	ListenerSpec = server.ListenerSpec
	SASLConfig   = server.SASLConfig
)

// The security protocols, by Kafka's names.
const (
	ProtoPlaintext     = server.ProtoPlaintext
	ProtoSSL           = server.ProtoSSL
	ProtoSASLPlaintext = server.ProtoSASLPlaintext
	ProtoSASLSSL       = server.ProtoSASLSSL
)

// Config configures one broker. Zero values take the documented defaults;
// call Validate (New does) before use.
type Config struct {
	// NodeID is this broker's id in Metadata responses. Must be >= 0.
	NodeID int32
	// DataDir holds topic metadata, partition logs, group offsets and
	// producer-id state. Created if missing.
	DataDir string
	// Listen is the Kafka listener, host:port: shorthand for one
	// PLAINTEXT listener named PLAINTEXT. Default 127.0.0.1:9092. With
	// Listeners it must be empty; Validate then sets it to the first
	// listener's address.
	Listen string
	// Advertise is the host:port clients are told to connect to.
	// Default: Listen (with 0.0.0.0/:: replaced by 127.0.0.1).
	Advertise string

	// Listeners and TLS (package server, listeners.go).
	//
	// Listeners are the named listeners (--listeners
	// name=PROTO://host:port,...). Empty: the one PLAINTEXT listener of
	// Listen.
	Listeners []ListenerSpec
	// AdvertisedListeners are the addresses clients are told, by
	// listener name (Proto is ignored). A listener not named here
	// advertises its bind address, 0.0.0.0/:: replaced by 127.0.0.1.
	AdvertisedListeners []ListenerSpec
	// InterBrokerListener names the listener the other brokers of a
	// cluster dial (its advertised address is the broker's KafkaAddr).
	// Default: the first PLAINTEXT listener, else the first listener.
	InterBrokerListener string
	// TLS are the PEM files of the SSL and SASL_SSL listeners and the
	// client certificate policy of the SSL ones.
	TLS tlsfiles.Files
	// TLSPrincipalMapping are the rules naming a client certificate's
	// principal (auth.PrincipalMapping). Default: User:<subject CN>.
	TLSPrincipalMapping string
	// TLSReloadInterval is how often the TLS files are checked for a
	// change (a changed file is loaded for new connections). Default 10s.
	TLSReloadInterval time.Duration
	// SASL configures the SASL_PLAINTEXT and SASL_SSL listeners
	// (package server, sasl.go).
	SASL SASLConfig

	// Security inside a cluster (cluster_tls.go).
	//
	// ClusterTLS puts the raft traffic and the brokers' Kafka client to
	// each other's (SSL) inter-broker listener on mutual TLS; setting any
	// of ClusterTLSFiles does too. Its empty files take TLS's.
	ClusterTLS      bool
	ClusterTLSFiles cluster.TLSFiles
	// GossipKeyFile holds the keys gossip is encrypted and authenticated
	// with (cluster.ReadGossipKeys). Empty: gossip in clear.
	GossipKeyFile string
	// HTTPListen serves /metrics, /healthz and /readyz. Empty: no HTTP.
	HTTPListen string

	// AutoCreateTopics creates a topic named in Metadata on first use
	// (auto.create.topics.enable). Default true; set DisableAutoCreate.
	DisableAutoCreate bool
	// DefaultPartitions is num.partitions for auto-created topics and
	// CreateTopics with -1 partitions. Default 1.
	DefaultPartitions int32
	// MaxRequestBytes bounds one request frame (socket.request.max.bytes).
	// Default 100 MiB. Larger frames close the connection.
	MaxRequestBytes int32
	// MaxInflightRequestBytes bounds the request bytes held by all
	// connections together (queued.max.request.bytes). Default 512 MiB;
	// raised to MaxRequestBytes if smaller.
	MaxInflightRequestBytes int64
	// MaxInflightPerConn bounds the requests a connection may have in
	// flight (read but not yet answered). Default 64.
	MaxInflightPerConn int

	// RetentionCheckInterval is how often retention and compaction run.
	// Default 30s.
	RetentionCheckInterval time.Duration
	// ProducerIDExpiration is how long a partition keeps an idempotent
	// producer's state after its last batch (producer.id.expiration.ms),
	// measured on batch timestamps (see broker/partition). Default 24h;
	// negative: forever.
	ProducerIDExpiration time.Duration
	// TransactionalIDExpiration is transactional.id.expiration.ms: a
	// transactional id with no open transaction and no change for this
	// long is forgotten by its coordinator. Default 7 days (0); negative:
	// never.
	TransactionalIDExpiration time.Duration
	// GroupInitialRebalanceDelay is group.initial.rebalance.delay.ms.
	// Default 3s.
	GroupInitialRebalanceDelay time.Duration
	// GroupInitialRebalanceDelaySet marks GroupInitialRebalanceDelay as
	// explicitly set (so 0 can be chosen).
	GroupInitialRebalanceDelaySet bool

	// TopicDefaults are broker-level defaults for topic configs
	// (e.g. "retention.ms": "604800000"). Unset keys use built-in defaults.
	TopicDefaults map[string]string

	// RaftListen turns on cluster mode (host:port of the raft listener
	// shared by the controller and, later, partition groups). Empty: a
	// single-node broker, exactly as without the other cluster fields.
	RaftListen string
	// RaftAdvertise is the raft address peers dial. Default: RaftListen
	// (0.0.0.0/:: replaced by 127.0.0.1).
	RaftAdvertise string
	// GossipListen is the memberlist address (TCP and UDP). Required in
	// cluster mode.
	GossipListen string
	// Join lists gossip addresses (host:port) of brokers to join. Needed
	// at a broker's first start only: later starts rejoin the brokers
	// remembered in DataDir (cluster.RemembersPeers).
	Join []string
	// BootstrapExpect is how many brokers form a new cluster (see
	// cluster.Config.BootstrapExpect). 0: join an existing cluster.
	BootstrapExpect int
	// ReplicaSnapshotEntries is how many raft entries a replicated
	// partition applies between snapshots (a snapshot fsyncs the
	// partition log and lets raft drop older entries beyond the 10240 it
	// keeps). Default 8192.
	ReplicaSnapshotEntries int
	// ReplicaHeartbeatTimeout is the raft heartbeat and election timeout
	// of replicated partitions: a dead leader is replaced after 1–2 times
	// this; the leader sends each follower a heartbeat every tenth of it,
	// which is most of an idle cluster's CPU. Default 1s, at least 100ms.
	ReplicaHeartbeatTimeout time.Duration
	// ReplicaDormantAfter puts a replicated partition's raft group to
	// sleep once its leader has had no write for this long (dormant.go):
	// an idle group then costs no CPU, and its first write after waits
	// for an election. 0 (the default): groups never sleep.
	ReplicaDormantAfter time.Duration
	// ReplicaTrailingLogs is how many applied raft entries a replicated
	// partition keeps behind each snapshot; a replica lagging by more gets
	// the partition's data in a snapshot instead. Default 10240.
	ReplicaTrailingLogs int
	// ReplicaReplaceAfter is how long a broker must be marked not alive
	// before the controller re-creates its replicas on other brokers.
	// Default 10m; negative: never.
	ReplicaReplaceAfter time.Duration
	// AutoRebalance lets the controller move replicas and leaders to
	// spread them evenly over the alive brokers (a broker that joins takes
	// its share). Off: only `simtel cluster rebalance` moves them.
	AutoRebalance bool

	// Authorizer is "acl" (Kafka's ACL authorizer over the ACLs kept in
	// the cluster's state, or a single broker's data directory) or "none"
	// (default: every request allowed).
	Authorizer string
	// SuperUsers are principals ("User:admin") the ACL authorizer allows
	// everything (super.users).
	SuperUsers []string
	// AllowEveryoneIfNoACLFound lets the ACL authorizer allow an
	// operation on a resource no ACL names
	// (allow.everyone.if.no.acl.found). Default false.
	AllowEveryoneIfNoACLFound bool

	Logger *slog.Logger
}

// clustered reports whether the broker runs as part of a cluster.
func (c *Config) clustered() bool { return c.RaftListen != "" }

func (c *Config) setDefaults() {
	c.setListenerDefaults()
	if c.DefaultPartitions <= 0 {
		c.DefaultPartitions = 1
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = 100 << 20
	}
	if c.MaxInflightRequestBytes <= 0 {
		c.MaxInflightRequestBytes = 512 << 20
	}
	c.MaxInflightRequestBytes = max(c.MaxInflightRequestBytes, int64(c.MaxRequestBytes))
	if c.MaxInflightPerConn <= 0 {
		c.MaxInflightPerConn = 64
	}
	if c.RetentionCheckInterval <= 0 {
		c.RetentionCheckInterval = 30 * time.Second
	}
	if !c.GroupInitialRebalanceDelaySet && c.GroupInitialRebalanceDelay == 0 {
		c.GroupInitialRebalanceDelay = 3 * time.Second
	}
	if c.ReplicaHeartbeatTimeout <= 0 {
		c.ReplicaHeartbeatTimeout = time.Second
	}
	if c.ReplicaSnapshotEntries <= 0 {
		c.ReplicaSnapshotEntries = 8192
	}
	if c.ReplicaTrailingLogs <= 0 {
		c.ReplicaTrailingLogs = 10240
	}
	if c.ProducerIDExpiration == 0 {
		c.ProducerIDExpiration = 24 * time.Hour
	}
	if c.ReplicaReplaceAfter == 0 {
		c.ReplicaReplaceAfter = 10 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate fills defaults and reports the first invalid field.
func (c *Config) Validate() error {
	if err := c.checkShorthand(); err != nil {
		return err
	}
	c.setDefaults()
	if c.NodeID < 0 {
		return fmt.Errorf("node id %d is negative: pass --node-id 0 or higher", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("no data directory: pass --data-dir DIR")
	}
	if err := c.validateListeners(); err != nil {
		return err
	}
	if err := c.SASL.Validate(c.Listeners); err != nil {
		return err
	}
	if err := c.validateClusterSecurity(); err != nil {
		return err
	}
	if !c.clustered() && (c.GossipListen != "" || len(c.Join) > 0 || c.BootstrapExpect != 0) {
		return errors.New("--gossip-listen, --join and --bootstrap-expect need --raft-listen (cluster mode)")
	}
	if c.clustered() {
		if c.NodeID > 65535 {
			return fmt.Errorf("node id %d is too large for cluster mode: use 0 to 65535", c.NodeID)
		}
		if c.GossipListen == "" {
			return errors.New("cluster mode needs --gossip-listen HOST:PORT besides --raft-listen")
		}
		if _, port, err := net.SplitHostPort(c.GossipListen); err != nil || port == "0" || port == "" {
			return fmt.Errorf("gossip address %q needs host and a fixed port (the other brokers --join it)", c.GossipListen)
		}
		if c.BootstrapExpect < 0 || c.BootstrapExpect > 5 {
			return fmt.Errorf("--bootstrap-expect %d must be between 1 and 5 (the controller's voters), or 0 to only join", c.BootstrapExpect)
		}
		if c.ReplicaHeartbeatTimeout < 100*time.Millisecond {
			return fmt.Errorf("--replica-heartbeat-timeout %v is too short: use 100ms or more (default 1s)", c.ReplicaHeartbeatTimeout)
		}
		if c.BootstrapExpect == 0 && len(c.Join) == 0 && !cluster.RemembersPeers(c.DataDir) {
			return errors.New("cluster mode needs --bootstrap-expect N (a new cluster) or --join HOST:PORT (an existing one); a broker that has met its cluster before rejoins without either")
		}
	}
	if err := c.validateAuthorizer(); err != nil {
		return err
	}
	for k, v := range c.TopicDefaults {
		if err := admin.ValidateTopicConfig(k, &v); err != nil {
			return fmt.Errorf("broker default for topic config %q: %w", k, err)
		}
	}
	return nil
}

// checkShorthand refuses Listen or Advertise besides Listeners (before
// setListenerDefaults, which makes them name the first listener).
func (c *Config) checkShorthand() error {
	if len(c.Listeners) == 0 {
		return nil
	}
	if (c.Listen != "" && c.Listen != c.Listeners[0].Addr) || (c.Advertise != "" && c.Advertise != c.advertisedAddr(c.Listeners[0].Name)) {
		return errors.New("--listen and --advertise are the one-listener shorthand: with --listeners use --advertised-listeners")
	}
	return nil
}

// setListenerDefaults turns Listen/Advertise into the one PLAINTEXT
// listener when no Listeners are given, and gives every listener without
// an advertised address its bind address (0.0.0.0 and :: as 127.0.0.1).
func (c *Config) setListenerDefaults() {
	if len(c.Listeners) == 0 {
		if c.Listen == "" {
			c.Listen = "127.0.0.1:9092"
		}
		c.Listeners = []ListenerSpec{{Name: ProtoPlaintext, Proto: ProtoPlaintext, Addr: c.Listen}}
		if c.Advertise != "" && len(c.AdvertisedListeners) == 0 {
			c.AdvertisedListeners = []ListenerSpec{{Name: ProtoPlaintext, Proto: ProtoPlaintext, Addr: c.Advertise}}
		}
	}
	for _, l := range c.Listeners {
		if slices.ContainsFunc(c.AdvertisedListeners, func(a ListenerSpec) bool { return a.Name == l.Name }) {
			continue
		}
		adv := l
		if host, port, err := net.SplitHostPort(l.Addr); err == nil {
			if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
				adv.Addr = net.JoinHostPort("127.0.0.1", port)
			}
		}
		c.AdvertisedListeners = append(c.AdvertisedListeners, adv)
	}
	if c.InterBrokerListener == "" {
		c.InterBrokerListener = c.Listeners[0].Name
		if i := slices.IndexFunc(c.Listeners, func(l ListenerSpec) bool { return l.Proto == ProtoPlaintext }); i >= 0 {
			c.InterBrokerListener = c.Listeners[i].Name
		}
	}
	if c.TLSReloadInterval <= 0 {
		c.TLSReloadInterval = 10 * time.Second
	}
	// Listen and Advertise keep naming the first listener, for what
	// reads them (logs, tests written before named listeners).
	c.Listen = c.Listeners[0].Addr
	c.Advertise = c.advertisedAddr(c.Listeners[0].Name)
}

// advertisedAddr is the host:port clients are told for a listener.
func (c *Config) advertisedAddr(name string) string {
	return server.AdvertisedAddr(c.AdvertisedListeners, name)
}

// validateListeners checks the listener fields after setListenerDefaults.
func (c *Config) validateListeners() error {
	names := map[string]bool{}
	tlsNeeded := false
	for _, l := range c.Listeners {
		switch l.Proto {
		case ProtoPlaintext, ProtoSSL, ProtoSASLPlaintext, ProtoSASLSSL:
		default:
			return fmt.Errorf("listener %s: security protocol %q is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", l.Name, l.Proto)
		}
		if l.Name == "" {
			return fmt.Errorf("listener %q has no name", l.String())
		}
		if names[l.Name] {
			return fmt.Errorf("listener name %q is used twice: every listener needs a name of its own", l.Name)
		}
		names[l.Name] = true
		if _, _, err := net.SplitHostPort(l.Addr); err != nil {
			return fmt.Errorf("listen address %q of listener %s is not host:port: %w", l.Addr, l.Name, err)
		}
		tlsNeeded = tlsNeeded || l.UsesTLS()
	}
	for _, a := range c.AdvertisedListeners {
		if !names[a.Name] {
			return fmt.Errorf("advertised listener %s names no listener (listeners: %s)", a.Name, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
		}
		if _, _, err := net.SplitHostPort(a.Addr); err != nil {
			return fmt.Errorf("advertised address %q of listener %s is not host:port: %w", a.Addr, a.Name, err)
		}
	}
	// A broker's gossiped meta (cluster.nodeMeta, JSON) carries every
	// advertised listener and must fit memberlist's 512 bytes with the
	// broker's other addresses.
	gossiped := 0
	for _, a := range c.AdvertisedListeners {
		gossiped += len(a.Name) + len(a.Addr) + 6
	}
	if c.clustered() && gossiped > 300 {
		return fmt.Errorf("the advertised listeners take %d bytes, more than the 300 a cluster can gossip: use fewer listeners or shorter names", gossiped)
	}
	if !names[c.InterBrokerListener] {
		return fmt.Errorf("inter-broker listener %q names no listener", c.InterBrokerListener)
	}
	if tlsNeeded && (c.TLS.Cert == "" || c.TLS.Key == "") {
		return errors.New("an SSL or SASL_SSL listener needs --tls-cert and --tls-key")
	}
	if c.TLSPrincipalMapping != "" {
		if _, err := auth.ParsePrincipalMapping(c.TLSPrincipalMapping); err != nil {
			return fmt.Errorf("--tls-principal-mapping: %w", err)
		}
	}
	return nil
}

// The values of Config.Authorizer.
const (
	AuthorizerNone = "none"
	AuthorizerACL  = "acl"
)

// validateAuthorizer checks the authorizer's settings.
func (c *Config) validateAuthorizer() error {
	switch c.Authorizer {
	case "", AuthorizerNone, AuthorizerACL:
	default:
		return fmt.Errorf("--authorizer %q: use acl or none", c.Authorizer)
	}
	for _, u := range c.SuperUsers {
		if typ, name, ok := strings.Cut(u, ":"); !ok || typ == "" || name == "" {
			return fmt.Errorf("superuser %q is not a principal: write it User:name", u)
		}
	}
	return nil
}
