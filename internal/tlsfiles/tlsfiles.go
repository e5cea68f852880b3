// Package tlsfiles serves TLS from PEM files that are read again when they
// change or on demand (SIGHUP), so a renewed certificate is used without a
// restart; the broker's listeners and the agent's HTTP listener use it.
package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/simtel/simtel/internal/tick"
)

// ClientAuth is whether a TLS listener asks its clients for a certificate
// (Kafka's ssl.client.auth).
type ClientAuth int

// The client certificate policies.
const (
	// ClientAuthNone asks for no certificate: every client is Anonymous
	// unless it authenticates by SASL.
	ClientAuthNone ClientAuth = iota
	// ClientAuthRequested asks for one; a client without one is let in as
	// Anonymous, a client with one that does not verify is refused.
	ClientAuthRequested
	// ClientAuthRequired refuses a client without a certificate that
	// verifies against the CA.
	ClientAuthRequired
)

// ParseClientAuth reads none, requested or required.
func ParseClientAuth(s string) (ClientAuth, error) {
	switch s {
	case "", "none":
		return ClientAuthNone, nil
	case "requested":
		return ClientAuthRequested, nil
	case "required":
		return ClientAuthRequired, nil
	}
	return 0, fmt.Errorf("client auth %q is not none, requested or required", s)
}

func (c ClientAuth) String() string {
	return [...]string{"none", "requested", "required"}[c]
}

// ErrNoClientCert is the handshake error of a client that sent no
// certificate to a listener that requires one.
var ErrNoClientCert = errors.New("the client sent no certificate and the listener requires one")

// Files names the PEM files of a TLS listener.
type Files struct {
	// Cert is the server's certificate chain, Key its private key.
	Cert, Key string
	// CA holds the certificates client certificates must chain to. Empty:
	// the system's roots.
	CA string
	// ClientAuth is the client certificate policy of SSL listeners.
	ClientAuth ClientAuth
}

// Server serves the current certificate and CA of a set of PEM files:
// Reload (or Watch, when the files change) swaps them for new handshakes
// while established connections keep the session they negotiated.
type Server struct {
	files Files
	log   *slog.Logger
	// cur is the tls.Config of new handshakes, per client auth policy.
	cur atomic.Pointer[[3]*tls.Config]

	mu    sync.Mutex
	stamp string // the files' sizes and mtimes at the last load attempt
}

// NewServer loads the files; an error names the file that failed.
func NewServer(files Files, log *slog.Logger) (*Server, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("a TLS listener needs --tls-cert and --tls-key")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Server{files: files, log: log}
	s.stamp = s.fileStamp()
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// Config is the tls.Config of a listener with the given client
// certificate policy. Each handshake takes the certificate loaded last.
func (s *Server) Config(ca ClientAuth) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load()[ca], nil
		},
	}
}

// Reload reads the files again. On an error the previous certificate
// stays in use.
func (s *Server) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stamp = s.fileStamp()
	return s.load()
}

// Watch reloads the files whenever their size or modification time
// changes, checking every interval, until ctx ends. A certificate renewed
// by writing the key and the certificate one after the other may fail to
// load in between; the next change loads it.
func (s *Server) Watch(ctx context.Context, interval time.Duration) {
	tick.Every(ctx, interval, s.reloadIfChanged)
}

func (s *Server) reloadIfChanged() {
	s.mu.Lock()
	stamp := s.fileStamp()
	changed := stamp != s.stamp
	s.stamp = stamp
	var err error
	if changed {
		err = s.load()
	}
	s.mu.Unlock()
	switch {
	case err != nil:
		s.log.Warn("cannot reload the TLS certificate; the previous one stays in use", "err", err)
	case changed:
		s.log.Info("TLS certificate reloaded", "cert", s.files.Cert)
	}
}

// fileStamp sums up the files' identity; a file that cannot be read
// stamps as missing.
func (s *Server) fileStamp() string {
	var b bytes.Buffer
	for _, p := range []string{s.files.Cert, s.files.Key, s.files.CA} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", p, st.Size(), st.ModTime().UnixNano())
		} else {
			fmt.Fprintf(&b, "%s:missing;", p)
		}
	}
	return b.String()
}

func (s *Server) load() error {
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("cannot load TLS certificate %s with key %s: %w", s.files.Cert, s.files.Key, err)
	}
	var pool *x509.CertPool
	if s.files.CA != "" {
		pem, err := os.ReadFile(s.files.CA)
		if err != nil {
			return fmt.Errorf("cannot read TLS CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("TLS CA file %s holds no PEM certificate", s.files.CA)
		}
	}
	var cfgs [3]*tls.Config
	for ca := range cfgs {
		cfgs[ca] = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
		}
		if ClientAuth(ca) == ClientAuthNone {
			continue
		}
		// A certificate that is sent is always verified; "required" is
		// enforced after that, so a missing certificate fails with an
		// error of its own (ErrNoClientCert) rather than a generic one.
		cfgs[ca].ClientAuth = tls.VerifyClientCertIfGiven
		if ClientAuth(ca) == ClientAuthRequired {
			cfgs[ca].VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return ErrNoClientCert
				}
				return nil
			}
		}
	}
	s.cur.Store(&cfgs)
	return nil
}

// FailureReason classifies a failed server handshake for the
// simtel_broker_auth_failures_total{mechanism="tls"} counter.
func FailureReason(err error) string {
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var te interface{ Timeout() bool }
	switch {
	case errors.Is(err, ErrNoClientCert):
		return "no_client_cert"
	case errors.As(err, &cv):
		return "bad_client_cert"
	case errors.As(err, &rh):
		return "not_tls"
	case errors.As(err, &te) && te.Timeout():
		return "timeout"
	}
	return "handshake"
}
