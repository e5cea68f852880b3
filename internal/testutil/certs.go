package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made for one test: it issues server
// certificates for loopback and client certificates with a given common
// name. Its PEM file is CAFile.
type CA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	CAFile string
	Pool   *x509.CertPool
}

// NewCA makes a CA in a temporary directory of t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: "simtel test CA", Organization: []string{"simtel tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("cannot create the test CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir(), Pool: x509.NewCertPool()}
	ca.Pool.AddCert(cert)
	ca.CAFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.CAFile, "CERTIFICATE", der)
	return ca
}

// Cert is one issued certificate: its PEM files and the pair loaded.
type Cert struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost,
// written as name.pem and name-key.pem in the CA's directory (replacing
// earlier files of that name, which is how a test renews one).
func (ca *CA) Server(t testing.TB, name string) Cert {
	t.Helper()
	return ca.loopback(t, name, x509.ExtKeyUsageServerAuth)
}

// Peer issues a certificate for both ends of a connection (serverAuth and
// clientAuth), as a broker of a cluster needs, for 127.0.0.1, ::1 and
// localhost.
func (ca *CA) Peer(t testing.TB, name string) Cert {
	t.Helper()
	return ca.loopback(t, name, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// loopback issues a certificate named name for 127.0.0.1, ::1 and
// localhost, with these uses.
func (ca *CA) loopback(t testing.TB, name string, usage ...x509.ExtKeyUsage) Cert {
	t.Helper()
	return ca.issue(t, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
		ExtKeyUsage: usage,
	})
}

// Client issues a client certificate with this subject (its common name
// is the principal's user name by default).
func (ca *CA) Client(t testing.TB, subject pkix.Name) Cert {
	t.Helper()
	return ca.issue(t, "client-"+subject.CommonName, &x509.Certificate{
		Subject:     subject,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *CA) issue(t testing.TB, name string, tmpl *x509.Certificate) Cert {
	key := newKey(t)
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("cannot issue test certificate %s: %v", name, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := Cert{CertFile: filepath.Join(ca.dir, name+".pem"), KeyFile: filepath.Join(ca.dir, name+"-key.pem")}
	// The key first: a watcher that sees the new certificate finds its
	// key already in place.
	writePEM(t, c.KeyFile, "PRIVATE KEY", kder)
	writePEM(t, c.CertFile, "CERTIFICATE", der)
	if c.TLS, err = tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientTLS is a client's tls.Config trusting the CA, presenting certs.
func (ca *CA) ClientTLS(certs ...Cert) *tls.Config {
	cfg := &tls.Config{RootCAs: ca.Pool, MinVersion: tls.VersionTLS12}
	for _, c := range certs {
		cfg.Certificates = append(cfg.Certificates, c.TLS)
	}
	return cfg
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// writePEM replaces path atomically (a rename), as a certificate renewal
// would, so a reader never sees half a file.
func writePEM(t testing.TB, path, typ string, der []byte) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
