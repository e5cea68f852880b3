package server

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
	"net"
	"slices"
	"strings"
	"time"

	"github.com/simtel/simtel/broker/auth"
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

// UsesTLS reports whether the listener's connections start with a TLS
// handshake.
func (s ListenerSpec) UsesTLS() bool { return s.Proto == ProtoSSL || s.Proto == ProtoSASLSSL }

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

// AdvertisedAddr is the host:port clients are told for the named
// listener, from a list of advertised listeners ("" if none names it).
func AdvertisedAddr(advertised []ListenerSpec, name string) string {
	for _, a := range advertised {
		if a.Name == name {
			return a.Addr
		}
	}
	return ""
}

// listener is one bound listener.
type listener struct {
	ListenerSpec
	advertise string // host:port told to clients
	ln        net.Listener
	tls       *tls.Config // nil: plaintext
}

// Bound is one bound listener as the broker sees it.
type Bound struct {
	ListenerSpec
	// Listen is the address bound; Advertise the host:port clients are
	// told (with a port 0 listener's port filled in).
	Listen    net.Addr
	Advertise string
}

// handshakeTimeout bounds a TLS handshake, so a client that connects and
// sends nothing holds no goroutine for long.
const handshakeTimeout = 10 * time.Second

// openListeners binds every listener and loads the TLS files.
func (s *Server) openListeners() error {
	if slices.ContainsFunc(s.cfg.Listeners, ListenerSpec.UsesTLS) {
		var err error
		if s.tls, err = tlsfiles.NewServer(s.cfg.TLS, s.log.With("part", "tls")); err != nil {
			return err
		}
		if s.principals, err = auth.ParsePrincipalMapping(s.cfg.TLSPrincipalMapping); err != nil {
			return err
		}
	}
	for _, spec := range s.cfg.Listeners {
		l := &listener{ListenerSpec: spec, advertise: AdvertisedAddr(s.cfg.AdvertisedListeners, spec.Name)}
		var err error
		if l.ln, err = net.Listen("tcp", spec.Addr); err != nil {
			return fmt.Errorf("cannot listen on %s (listener %s): %w", spec.Addr, spec.Name, err)
		}
		s.listeners = append(s.listeners, l)
		// With port 0 the kernel picks the port; clients must be told that one.
		if host, port, _ := net.SplitHostPort(l.advertise); port == "0" {
			_, real, _ := net.SplitHostPort(l.ln.Addr().String())
			l.advertise = net.JoinHostPort(host, real)
		}
		switch {
		case spec.Proto == ProtoSSL:
			l.tls = s.tls.Config(s.cfg.TLS.ClientAuth)
		case spec.Proto == ProtoSASLSSL:
			// SASL names the client; a certificate is not asked for.
			l.tls = s.tls.Config(tlsfiles.ClientAuthNone)
		}
		s.bound = append(s.bound, Bound{ListenerSpec: spec, Listen: l.ln.Addr(), Advertise: l.advertise})
	}
	return nil
}

// Bound lists the bound listeners in the configured order (the caller
// must not change it).
func (s *Server) Bound() []Bound { return s.bound }

// ReloadTLS reads the TLS certificate, key and CA files again (SIGHUP).
// New connections get the new certificate; open ones keep theirs. On an
// error the previous files stay in use. Without a TLS listener it does
// nothing.
func (s *Server) ReloadTLS() error {
	if s.tls == nil {
		return nil
	}
	return s.tls.Reload()
}

// CloseListeners stops accepting on every listener.
func (s *Server) CloseListeners() {
	for _, l := range s.listeners {
		l.ln.Close()
	}
}

// accept starts serving one accepted connection: a TLS listener's
// connection first completes its handshake (a failure is logged with the
// peer's address and counted, and the connection closed), then the
// connection is served with its listener's name, protocol and the
// principal of its client certificate.
func (s *Server) accept(ctx context.Context, l *listener, nc net.Conn) {
	principal := auth.Anonymous
	if l.tls != nil {
		tc := tls.Server(nc, l.tls)
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err == nil {
			principal, err = s.certPrincipal(tc.ConnectionState())
		}
		if err != nil {
			reason := tlsfiles.FailureReason(err)
			if errors.Is(err, auth.ErrNoMappingRule) {
				reason = "no_mapping_rule"
			}
			s.metrics.authFailures.WithLabelValues("tls", reason).Inc()
			if ctx.Err() == nil {
				s.log.Warn("TLS handshake failed", "listener", l.Name, "remote", nc.RemoteAddr().String(), "reason", reason, "err", err)
			}
			nc.Close()
			return
		}
		nc = tc
	}
	s.serveConn(ctx, nc, l, principal)
}

// certPrincipal is the principal of a TLS client: its certificate's,
// Anonymous without one.
func (s *Server) certPrincipal(cs tls.ConnectionState) (auth.Principal, error) {
	if len(cs.PeerCertificates) == 0 {
		return auth.Anonymous, nil
	}
	return s.principals.Principal(cs.PeerCertificates[0])
}
