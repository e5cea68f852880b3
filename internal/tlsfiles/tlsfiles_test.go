package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"net"
	"os"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// handshake runs one TLS handshake over loopback TCP between a server
// with cfg and a client with ccfg; it returns the server's error and the
// certificates the server saw.
func handshake(t *testing.T, cfg, ccfg *tls.Config) (error, tls.ConnectionState) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		err error
		cs  tls.ConnectionState
	}
	done := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer nc.Close()
		tc := tls.Server(nc, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = tc.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the
			// client's side of the handshake; read so an alert goes out.
			_, _ = tc.Write([]byte{1})
		}
		done <- result{err, tc.ConnectionState()}
	}()
	nc, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
	if err == nil {
		var b [1]byte
		_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = nc.Read(b[:])
		nc.Close()
	}
	r := <-done
	return r.err, r.cs
}

func TestTLSServerClientAuth(t *testing.T) {
	ca := testutil.NewCA(t)
	other := testutil.NewCA(t)
	srv := ca.Server(t, "broker")
	alice := ca.Client(t, pkix.Name{CommonName: "alice"})
	mallory := other.Client(t, pkix.Name{CommonName: "mallory"})
	ts, err := tlsfiles.NewServer(tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile, CA: ca.CAFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		policy  tlsfiles.ClientAuth
		certs   []testutil.Cert
		reason  string // "" : accepted
		subject string // the client certificate the server saw
	}{
		{"none without cert", tlsfiles.ClientAuthNone, nil, "", ""},
		{"none ignores a cert", tlsfiles.ClientAuthNone, []testutil.Cert{alice}, "", ""},
		{"requested without cert", tlsfiles.ClientAuthRequested, nil, "", ""},
		{"requested with cert", tlsfiles.ClientAuthRequested, []testutil.Cert{alice}, "", "alice"},
		{"requested with a foreign cert", tlsfiles.ClientAuthRequested, []testutil.Cert{mallory}, "bad_client_cert", ""},
		{"required without cert", tlsfiles.ClientAuthRequired, nil, "no_client_cert", ""},
		{"required with cert", tlsfiles.ClientAuthRequired, []testutil.Cert{alice}, "", "alice"},
		{"required with a foreign cert", tlsfiles.ClientAuthRequired, []testutil.Cert{mallory}, "bad_client_cert", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err, cs := handshake(t, ts.Config(tc.policy), ca.ClientTLS(tc.certs...))
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("handshake failed: %v", err)
				}
				got := ""
				if len(cs.PeerCertificates) > 0 {
					got = cs.PeerCertificates[0].Subject.CommonName
				}
				if got != tc.subject {
					t.Fatalf("server saw client certificate %q, want %q", got, tc.subject)
				}
				return
			}
			if err == nil {
				t.Fatal("handshake succeeded, want it refused")
			}
			if got := tlsfiles.FailureReason(err); got != tc.reason {
				t.Fatalf("reason %q (err %v), want %q", got, err, tc.reason)
			}
		})
	}
}

func TestTLSFailureReasonNotTLS(t *testing.T) {
	_, _, ts := brokerServer(t)
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		// A Kafka ApiVersions request where a ClientHello belongs.
		_, _ = b.Write([]byte{0, 0, 0, 10, 0, 18, 0, 3, 0, 0, 0, 1, 0, 0})
		b.Close()
	}()
	err := tls.Server(a, ts.Config(tlsfiles.ClientAuthNone)).Handshake()
	if got := tlsfiles.FailureReason(err); got != "not_tls" {
		t.Fatalf("reason %q (err %v), want not_tls", got, err)
	}
}

func TestTLSServerReload(t *testing.T) {
	ca, first, ts := brokerServer(t)
	serial := func() string {
		t.Helper()
		ln, err := tls.Listen("tcp", "127.0.0.1:0", ts.Config(tlsfiles.ClientAuthNone))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			if nc, err := ln.Accept(); err == nil {
				_ = nc.(*tls.Conn).Handshake()
				nc.Close()
			}
		}()
		nc, err := tls.Dial("tcp", ln.Addr().String(), ca.ClientTLS())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer nc.Close()
		return nc.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	s1 := serial()

	// A renewal: new files in place, then SIGHUP (Reload).
	second := ca.Server(t, "broker")
	if s := serial(); s != s1 {
		t.Fatalf("certificate changed to %s before a reload", s)
	}
	if err := ts.Reload(); err != nil {
		t.Fatal(err)
	}
	s2 := serial()
	if s2 == s1 || s2 != second.TLS.Leaf.SerialNumber.String() {
		t.Fatalf("after Reload the server presents serial %s, want the new %s (old %s)", s2, second.TLS.Leaf.SerialNumber, s1)
	}

	// A broken file keeps the previous certificate.
	if err := os.WriteFile(first.KeyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ts.Reload(); err == nil {
		t.Fatal("Reload of a broken key succeeded")
	}
	if s := serial(); s != s2 {
		t.Fatalf("after a failed reload the server presents %s, want the previous %s", s, s2)
	}

	// Watch picks up the next renewal by itself.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ts.Watch(ctx, 20*time.Millisecond)
	third := ca.Server(t, "broker")
	want := third.TLS.Leaf.SerialNumber.String()
	deadline := time.Now().Add(10 * time.Second)
	for serial() != want {
		if time.Now().After(deadline) {
			t.Fatal("Watch did not load the renewed certificate within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// brokerServer makes a CA and a TLS server of the broker certificate it
// signs, without client certificates.
func brokerServer(t *testing.T) (*testutil.CA, testutil.Cert, *tlsfiles.Server) {
	t.Helper()
	ca := testutil.NewCA(t)
	srv := ca.Server(t, "broker")
	ts, err := tlsfiles.NewServer(tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ca, srv, ts
}

func TestParseClientAuth(t *testing.T) {
	for in, want := range map[string]tlsfiles.ClientAuth{"": tlsfiles.ClientAuthNone, "none": tlsfiles.ClientAuthNone, "requested": tlsfiles.ClientAuthRequested, "required": tlsfiles.ClientAuthRequired} {
		if got, err := tlsfiles.ParseClientAuth(in); err != nil || got != want {
			t.Errorf("ParseClientAuth(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := tlsfiles.ParseClientAuth("want"); err == nil {
		t.Error(`ParseClientAuth("want") succeeded`)
	}
}
