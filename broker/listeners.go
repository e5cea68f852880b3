package broker

// Named listeners. A broker serves Kafka on one or more listeners, each
// with a name, a security protocol (Kafka's PLAINTEXT, SSL,
// SASL_PLAINTEXT, SASL_SSL), its bind address and the address clients are
// told. A client connected to listener "internal" learns from Metadata,
// FindCoordinator and DescribeCluster the "internal" address of every
// broker: in a cluster each broker gossips all its advertised listeners
// (cluster.BrokerInfo.Listeners), and the inter-broker listener's address
// is also its KafkaAddr, which the brokers dial themselves.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// The security protocols, by Kafka's names.
const (
	ProtoPlaintext     = "PLAINTEXT"
	ProtoSSL           = "SSL"
	ProtoSASLPlaintext = "SASL_PLAINTEXT"
	ProtoSASLSSL       = "SASL_SSL"
)

// ListenerSpec is one listener as configured: --listeners
// name=PROTO://host:port.
type ListenerSpec struct {
	Name  string // unique among the broker's listeners
	Proto string // PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
	Addr  string // host:port
}

func (s ListenerSpec) String() string { return s.Name + "=" + s.Proto + "://" + s.Addr }

// usesTLS reports whether the listener's connections start with a TLS
// handshake.
func (s ListenerSpec) usesTLS() bool { return s.Proto == ProtoSSL || s.Proto == ProtoSASLSSL }

// ParseListeners reads a comma-separated list of name=PROTO://host:port.
// The name may be left out (PROTO://host:port): it is then the protocol's
// name, as Kafka's default listener.security.protocol.map has it.
func ParseListeners(s string) ([]ListenerSpec, error) {
	var out []ListenerSpec
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, rest, named := strings.Cut(item, "=")
		if !named {
			rest = item
		}
		proto, addr, ok := strings.Cut(rest, "://")
		if !ok {
			return nil, fmt.Errorf("listener %q is not name=PROTOCOL://host:port", item)
		}
		proto = strings.ToUpper(proto)
		if !named {
			name = proto
		}
		out = append(out, ListenerSpec{Name: name, Proto: proto, Addr: addr})
	}
	return out, nil
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
	for _, a := range c.AdvertisedListeners {
		if a.Name == name {
			return a.Addr
		}
	}
	return ""
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
		tlsNeeded = tlsNeeded || l.usesTLS()
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

// listener is one bound listener.
type listener struct {
	ListenerSpec
	advertise string // host:port told to clients
	ln        net.Listener
	tls       *tls.Config // nil: plaintext
}

// handshakeTimeout bounds a TLS handshake, so a client that connects and
// sends nothing holds no goroutine for long.
const handshakeTimeout = 10 * time.Second

// openListeners binds every listener and loads the TLS files.
func (b *Broker) openListeners() error {
	if slices.ContainsFunc(b.cfg.Listeners, ListenerSpec.usesTLS) {
		var err error
		if b.tls, err = tlsfiles.NewServer(b.cfg.TLS, b.log.With("part", "tls")); err != nil {
			return err
		}
		if b.principals, err = auth.ParsePrincipalMapping(b.cfg.TLSPrincipalMapping); err != nil {
			return err
		}
	}
	for _, spec := range b.cfg.Listeners {
		l := &listener{ListenerSpec: spec, advertise: b.cfg.advertisedAddr(spec.Name)}
		var err error
		if l.ln, err = net.Listen("tcp", spec.Addr); err != nil {
			return fmt.Errorf("cannot listen on %s (listener %s): %w", spec.Addr, spec.Name, err)
		}
		b.listeners = append(b.listeners, l)
		// With port 0 the kernel picks the port; clients must be told that one.
		if host, port, _ := net.SplitHostPort(l.advertise); port == "0" {
			_, real, _ := net.SplitHostPort(l.ln.Addr().String())
			l.advertise = net.JoinHostPort(host, real)
		}
		switch {
		case spec.Proto == ProtoSSL:
			l.tls = b.tls.Config(b.cfg.TLS.ClientAuth)
		case spec.Proto == ProtoSASLSSL:
			// SASL names the client; a certificate is not asked for.
			l.tls = b.tls.Config(tlsfiles.ClientAuthNone)
		}
	}
	b.cfg.Advertise = b.listeners[0].advertise
	return nil
}

// ReloadTLS reads the TLS certificate, key and CA files again (SIGHUP),
// and the cluster's (cluster_tls.go).
// New connections get the new certificate; open ones keep theirs. On an
// error the previous files stay in use.
func (b *Broker) ReloadTLS() error {
	err := b.reloadClusterSecurity()
	if b.tls == nil {
		return err
	}
	return errors.Join(b.tls.Reload(), err)
}

// ListenerAddr is the bound address of the named listener, nil if there
// is none of that name.
func (b *Broker) ListenerAddr(name string) net.Addr {
	for _, l := range b.listeners {
		if l.Name == name {
			return l.ln.Addr()
		}
	}
	return nil
}

// closeListeners stops accepting on every listener.
func (b *Broker) closeListeners() {
	for _, l := range b.listeners {
		l.ln.Close()
	}
}

// advertisedListeners maps each listener's name to its advertised
// address, as gossiped to the other brokers.
func (b *Broker) advertisedListeners() map[string]string {
	m := make(map[string]string, len(b.listeners))
	for _, l := range b.listeners {
		m[l.Name] = l.advertise
	}
	return m
}

// interBrokerAddr is the advertised address of the listener the other
// brokers dial.
func (b *Broker) interBrokerAddr() string {
	for _, l := range b.listeners {
		if l.Name == b.cfg.InterBrokerListener {
			return l.advertise
		}
	}
	return b.cfg.Advertise
}

// advertised is this broker's address on the named listener ("" or an
// unknown name: the inter-broker listener).
func (b *Broker) advertised(listenerName string) (string, int32) {
	for _, l := range b.listeners {
		if l.Name == listenerName {
			return splitHostPort(l.advertise)
		}
	}
	return splitHostPort(b.interBrokerAddr())
}

// brokerAddr is where a client of the named listener reaches a broker of
// the cluster: its address on the listener of that name; a broker
// registered before named listeners existed has only KafkaAddr. A broker
// without that listener is not reachable from it (ok false), and Kafka
// leaves such a broker out.
func brokerAddr(listenerName string, br cluster.BrokerInfo) (host string, port int32, ok bool) {
	if len(br.Listeners) == 0 || listenerName == "" {
		host, port = splitHostPort(br.KafkaAddr)
		return host, port, true
	}
	addr, ok := br.Listeners[listenerName]
	if !ok {
		return "", 0, false
	}
	host, port = splitHostPort(addr)
	return host, port, true
}

// accept starts serving one accepted connection: a TLS listener's
// connection first completes its handshake (a failure is logged with the
// peer's address and counted, and the connection closed), then the
// connection is served with its listener's name, protocol and the
// principal of its client certificate.
func (b *Broker) accept(ctx context.Context, l *listener, nc net.Conn) {
	principal := auth.Anonymous
	if l.tls != nil {
		tc := tls.Server(nc, l.tls)
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err == nil {
			principal, err = b.certPrincipal(tc.ConnectionState())
		}
		if err != nil {
			reason := tlsfiles.FailureReason(err)
			if errors.Is(err, auth.ErrNoMappingRule) {
				reason = "no_mapping_rule"
			}
			b.metrics.authFailures.WithLabelValues("tls", reason).Inc()
			if ctx.Err() == nil {
				b.log.Warn("TLS handshake failed", "listener", l.Name, "remote", nc.RemoteAddr().String(), "reason", reason, "err", err)
			}
			nc.Close()
			return
		}
		nc = tc
	}
	b.serveConn(ctx, nc, l, principal)
}

// certPrincipal is the principal of a TLS client: its certificate's,
// Anonymous without one.
func (b *Broker) certPrincipal(cs tls.ConnectionState) (auth.Principal, error) {
	if len(cs.PeerCertificates) == 0 {
		return auth.Anonymous, nil
	}
	return b.principals.Principal(cs.PeerCertificates[0])
}
