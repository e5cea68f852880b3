package cluster

// Mutual TLS inside the cluster. With Config.TLS set, every connection to
// the raft mux (raft streams of every group, coalesced heartbeats,
// forwarded controller commands, failure-detector watches) is TLS 1.2+
// and both ends present a certificate that must chain to the cluster CA;
// a peer that cannot is refused before it sends a byte of raft. The same
// client configuration serves the brokers' Kafka client to each other's
// inter-broker listener (see broker/cluster_tls.go).
//
// Peers are brokers reached at whatever address they advertise, so host
// names are not checked; what makes a peer a member is its chain to the
// cluster CA and, when PeerNames is set, its name (subject CN or a DNS
// name) in that list. A certificate may carry either the serverAuth or
// the clientAuth extended key usage: each broker is both ends of a link.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// TLSFiles names the PEM files of the cluster's mutual TLS.
type TLSFiles struct {
	// Cert is this broker's certificate chain, Key its private key.
	Cert, Key string
	// CA holds the certificates a peer's certificate must chain to.
	// Required: the system's roots would let any public certificate in.
	CA string
	// PeerNames, when not empty, are the only names (subject common name
	// or DNS subject alternative name) a peer's certificate may have:
	// needed when the CA also signs certificates of non-brokers.
	PeerNames []string
}

// TLS is the cluster's mutual TLS: the loaded certificate and CA, which
// Reload replaces for new handshakes.
type TLS struct {
	files TLSFiles
	cur   atomic.Pointer[tlsState]
	// sessions lets a dial resume an earlier session with the same peer
	// (a new mux session after a broken one, the inter-broker Kafka
	// client's connections): a resumed handshake skips both
	// certificate signatures. verifyPeer still
	// checks the peer's chain against the current CA.
	sessions tls.ClientSessionCache
}

type tlsState struct {
	cert tls.Certificate
	pool *x509.CertPool
}

// NewTLS loads the files; an error names the file that failed.
func NewTLS(files TLSFiles) (*TLS, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("cluster TLS needs a certificate and a key (--cluster-tls-cert, --cluster-tls-key or --tls-cert, --tls-key)")
	}
	if files.CA == "" {
		return nil, errors.New("cluster TLS needs the cluster's CA (--cluster-tls-ca or --tls-ca)")
	}
	t := &TLS{files: files, sessions: tls.NewLRUClientSessionCache(64)}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again; on an error the previous ones stay in
// use. Established connections keep their session.
func (t *TLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(t.files.Cert, t.files.Key)
	if err != nil {
		return fmt.Errorf("cannot load cluster TLS certificate %s with key %s: %w", t.files.Cert, t.files.Key, err)
	}
	pem, err := os.ReadFile(t.files.CA)
	if err != nil {
		return fmt.Errorf("cannot read cluster TLS CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("cluster TLS CA file %s holds no PEM certificate", t.files.CA)
	}
	t.cur.Store(&tlsState{cert: cert, pool: pool})
	return nil
}

// ServerConfig is the raft mux's side: a client certificate is required
// and verified as a peer's.
func (t *TLS) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verified by verifyPeer (either key usage, the peer names)
		// instead of crypto/tls's client check, which wants clientAuth.
		ClientAuth: tls.RequireAnyClientCert,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return &t.cur.Load().cert, nil
		},
		VerifyConnection: t.verifyPeer,
	}
}

// ClientConfig is the dialing side, for the raft mux and for a broker's
// Kafka client to another broker.
func (t *TLS) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is verified by verifyPeer: peers are not checked
		// against the address dialed (see the file comment).
		InsecureSkipVerify: true,
		ClientSessionCache: t.sessions,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &t.cur.Load().cert, nil
		},
		VerifyConnection: t.verifyPeer,
	}
}

// ErrPeerName is the handshake error of a peer whose certificate chains to
// the cluster CA but is not one of TLSFiles.PeerNames.
var ErrPeerName = errors.New("the peer's certificate names no broker of the cluster")

func (t *TLS) verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("the peer sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots:         t.cur.Load().pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
	}
	if len(t.files.PeerNames) == 0 {
		return nil
	}
	if slices.Contains(t.files.PeerNames, leaf.Subject.CommonName) {
		return nil
	}
	for _, n := range leaf.DNSNames {
		if slices.Contains(t.files.PeerNames, n) {
			return nil
		}
	}
	return fmt.Errorf("%w: %q", ErrPeerName, leaf.Subject.CommonName)
}

// tlsFailureReason classifies a failed handshake on the raft mux for
// simtel_broker_cluster_tls_failures_total.
func tlsFailureReason(err error) string {
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var te interface{ Timeout() bool }
	switch {
	case errors.Is(err, ErrPeerName):
		return "peer_name"
	case errors.As(err, &cv):
		return "bad_cert"
	case errors.As(err, &rh):
		return "not_tls"
	case errors.As(err, &te) && te.Timeout():
		return "timeout"
	case strings.Contains(err.Error(), "didn't provide a certificate"), strings.Contains(err.Error(), "certificate required"), strings.Contains(err.Error(), "sent no certificate"):
		return "no_cert"
	}
	return "handshake"
}

// gossipFailureCounter counts memberlist's log lines about a message or a
// state exchange it could not decrypt (or one not encrypted at all), on
// their way to the log.
type gossipFailureCounter struct {
	w io.Writer
	c prometheus.Counter
}

func (g *gossipFailureCounter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		if bytes.Contains(line, []byte("[ERR]")) && bytes.Contains(bytes.ToLower(line), []byte("crypt")) {
			g.c.Inc()
		}
	}
	return g.w.Write(p)
}

// ReadGossipKeys reads a gossip key file: one base64 key (16, 24 or 32
// bytes: AES-128, -192 or -256) per line, the first the one gossip is
// encrypted with, the others still accepted (a rotation in progress).
// Blank lines and lines starting with # are skipped.
func ReadGossipKeys(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the gossip key file: %w", err)
	}
	var keys [][]byte
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(line)
		if err != nil {
			return nil, fmt.Errorf("gossip key file %s, line %d: not base64: %w", path, i+1, err)
		}
		if n := len(k); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("gossip key file %s, line %d: a key of %d bytes (16, 24 or 32 wanted)", path, i+1, n)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("gossip key file %s holds no key", path)
	}
	return keys, nil
}
