package gossip

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the gossip port used when Bind has none. It is not
// memberlist's 7946 so that an agent and a broker (which gossips too) can
// share a host, as they do under `simtel dev`.
const DefaultPort = 7947

// Config configures one node's membership in a pool. Zero values take the
// documented defaults; Validate (called by Start) fills them in.
type Config struct {
	// NodeName identifies the node in the pool and must be unique in it.
	// The agent uses its host tag. Required.
	NodeName string

	// Bind is the host:port gossip listens on, TCP and UDP. The host must
	// be an IP literal or empty (all interfaces); port 0 picks a free port,
	// which Pool.Addr reports. Default "0.0.0.0:7947".
	Bind string

	// Advertise is the host:port (or host) other nodes reach this node at.
	// A hostname is resolved once at Start. Default: the bound address,
	// or, when bound to all interfaces, a private address of this host
	// chosen by memberlist.
	Advertise string

	// Join lists seed nodes (host:port; a host alone means this node's
	// bind port, as in memberlist).
	// Start returns at once and a background goroutine calls memberlist's
	// Join with exponential backoff (50ms..1s with Fast, else 1s..30s)
	// until this node has at least one peer, so agents can start in any
	// order. The list may contain this node itself. Empty means this is
	// the first node: it waits for others to join it.
	Join []string

	// Cluster names the pool, normally the run id. It becomes memberlist's
	// Label (prefixed "simtel-agent/", hashed when too long), which is
	// sent in front of every packet and stream; nodes with another label
	// drop them, so the pools of two runs that share seeds never merge.
	// The label is a guard against mistakes, not authentication.
	Cluster string

	// Relay is the host:port of this node's policy relay (agents serve
	// the policy chunks they hold to each other there), advertised in
	// the node's meta and shown in View as NodeHolding.Relay. Empty: the
	// node does not relay. ":port" (a relay on all interfaces) is
	// completed with the host of the node's gossip address. At most 260
	// bytes.
	Relay string

	// Logger receives the package's own logs; memberlist's log lines are
	// routed into it at debug level. Default: discard.
	Logger *slog.Logger

	// Fast selects memberlist.DefaultLocalConfig timing (probe every 1s,
	// gossip every 100ms, push/pull every 15s), meant for tests on one
	// machine; the retransmit multiplier stays at the LAN value (4).
	// Default: memberlist.DefaultLANConfig (gossip every 200ms, push/pull
	// every 30s, both scaled up by memberlist for large pools).
	Fast bool
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("no gossip node name: every node of a pool needs a unique name")
	}
	if c.Bind == "" {
		c.Bind = net.JoinHostPort("0.0.0.0", strconv.Itoa(DefaultPort))
	}
	host, _, err := splitHostPort(c.Bind)
	if err != nil {
		return fmt.Errorf("cannot use gossip bind address %q: %w", c.Bind, err)
	}
	if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("cannot use gossip bind address %q: host must be an IP address", c.Bind)
	}
	if c.Advertise != "" {
		if _, _, err := splitHostPort(c.Advertise); err != nil {
			return fmt.Errorf("cannot use gossip advertise address %q: %w", c.Advertise, err)
		}
	}
	if len(c.Relay) > maxRelayAddr {
		return fmt.Errorf("gossip relay address %.40q... is longer than %d bytes", c.Relay, maxRelayAddr)
	}
	for _, s := range c.Join {
		if strings.TrimSpace(s) == "" {
			return errors.New("empty gossip seed address in join list")
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// splitHostPort accepts "host:port", "host" and ":port"; a missing port
// is DefaultPort.
func splitHostPort(s string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		// No port: a bare host or IPv6 literal.
		if ip := net.ParseIP(strings.Trim(s, "[]")); ip != nil || !strings.Contains(s, ":") {
			return strings.Trim(s, "[]"), DefaultPort, nil
		}
		return "", 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	return host, port, nil
}

// label derives memberlist's Label from the cluster name.
func label(cluster string) string {
	const prefix = "simtel-agent/"
	l := prefix + cluster
	if len(l) > memberlist.LabelMaxSize {
		sum := sha256.Sum256([]byte(cluster))
		l = prefix + "sha256:" + hex.EncodeToString(sum[:])
	}
	return l
}

// memberlistConfig translates c (validated) into memberlist's config.
func (c *Config) memberlistConfig(d *delegate) (*memberlist.Config, error) {
	mc := memberlist.DefaultLANConfig()
	if c.Fast {
		mc = memberlist.DefaultLocalConfig()
		// DefaultLocalConfig sends each broadcast only 2*ceil(log10(n+1))
		// times, and memberlist counts every gossip target as one
		// transmission: in a pool of 5 a meta update then misses a node
		// about one time in ten and waits for the next push/pull (15s).
		// Keep the LAN multiplier; only the timing is local.
		mc.RetransmitMult = memberlist.DefaultLANConfig().RetransmitMult
	}
	mc.Name = c.NodeName
	host, port, _ := splitHostPort(c.Bind)
	if host == "" {
		host = "0.0.0.0"
	}
	mc.BindAddr, mc.BindPort = host, port
	mc.AdvertisePort = port
	if c.Advertise != "" {
		ahost, aport, _ := splitHostPort(c.Advertise)
		if net.ParseIP(ahost) == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ips, err := net.DefaultResolver.LookupIP(ctx, "ip", ahost)
			cancel()
			if err != nil || len(ips) == 0 {
				return nil, fmt.Errorf("cannot resolve gossip advertise host %q: %w", ahost, err)
			}
			ahost = ips[0].String()
		}
		mc.AdvertiseAddr, mc.AdvertisePort = ahost, aport
	}
	mc.Label = label(c.Cluster)
	mc.Delegate = d
	mc.Events = d
	mc.Logger = log.New(&logWriter{log: c.Logger}, "", 0)
	return mc, nil
}

// logWriter turns memberlist's "[LEVEL] memberlist: text" lines into slog
// debug records.
type logWriter struct {
	log *slog.Logger
}

func (w *logWriter) Write(b []byte) (int, error) {
	line := string(bytes.TrimSpace(b))
	lvl := ""
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			lvl, line = strings.ToLower(line[1:i]), strings.TrimSpace(line[i+1:])
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	w.log.Debug("memberlist", "level", lvl, "text", line)
	return len(b), nil
}
