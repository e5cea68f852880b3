package broker_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/auth"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// saslBroker is a broker with a PLAINTEXT listener (Addr, for setup) and a
// SASL_PLAINTEXT one (SASL) offering every mechanism: alice's password is
// "alice-secret" for both SCRAM hashes, HS256 tokens are signed with key.
type saslBroker struct {
	*testBroker
	SASL string
	key  []byte
}

func startSASLBroker(t *testing.T, mods ...func(*broker.Config)) *saslBroker {
	t.Helper()
	creds := auth.CredentialMap{}
	for _, m := range []auth.ScramMechanism{auth.ScramSHA256, auth.ScramSHA512} {
		if err := creds.Add("alice", "alice-secret", m, auth.MinScramIterations); err != nil {
			t.Fatal(err)
		}
	}
	sb := &saslBroker{SASL: testutil.FreePort(t), key: []byte("an HS256 key of at least 32 bytes")}
	keyFile := filepath.Join(t.TempDir(), "hs256.key")
	if err := os.WriteFile(keyFile, sb.key, 0o600); err != nil {
		t.Fatal(err)
	}
	mods = append([]func(*broker.Config){func(c *broker.Config) {
		c.Listen = ""
		c.Listeners = []broker.ListenerSpec{
			{Name: "local", Proto: "PLAINTEXT", Addr: "127.0.0.1:0"},
			{Name: "sasl", Proto: "SASL_PLAINTEXT", Addr: sb.SASL},
		}
		c.SASL = broker.SASLConfig{Mechanisms: auth.Mechanisms, Credentials: creds, OAuthHMACKeyFile: keyFile}
	}}, mods...)
	sb.testBroker = startBroker(t, t.TempDir(), mods...)
	return sb
}

func (sb *saslBroker) client(t *testing.T, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(sb.SASL), kgo.SASL(m)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (sb *saslBroker) token(t *testing.T, sub string, exp time.Time) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": sub, "exp": exp.Unix()}).SignedString(sb.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// metric is the value of one series on the broker's /metrics, 0 if absent.
func (sb *saslBroker) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + sb.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func TestSASLMechanismsProduceAndConsume(t *testing.T) {
	sb := startSASLBroker(t)
	for _, m := range []sasl.Mechanism{
		plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(),
		scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(),
		scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
		oauth.Auth{Token: sb.token(t, "alice", time.Now().Add(time.Hour))}.AsMechanism(),
	} {
		t.Run(m.Name(), func(t *testing.T) {
			topic := "sasl-" + strings.ToLower(m.Name())
			cl := sb.client(t, m, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.AllowAutoTopicCreation())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := cl.ProduceSync(ctx, kgo.StringRecord("hello "+m.Name())).FirstErr(); err != nil {
				t.Fatalf("produce over %s: %v", m.Name(), err)
			}
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("fetch over %s: %v", m.Name(), err)
			}
			if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "hello "+m.Name() {
				t.Fatalf("consumed %v", recs)
			}
		})
	}
}

func TestSASLRefusals(t *testing.T) {
	sb := startSASLBroker(t, func(c *broker.Config) {
		c.SASL.Mechanisms = []string{"SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"}
	})
	ping := func(m sasl.Mechanism) error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		return sb.client(t, m).Ping(ctx)
	}
	for _, tc := range []struct {
		m      sasl.Mechanism
		want   error
		series string
	}{
		{scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism(), kerr.SaslAuthenticationFailed, `simtel_broker_auth_failures_total{mechanism="SCRAM-SHA-512",reason="bad_credentials"}`},
		{scram.Auth{User: "nobody", Pass: "x"}.AsSha512Mechanism(), kerr.SaslAuthenticationFailed, ""},
		{plain.Auth{User: "alice", Pass: "wrong"}.AsMechanism(), kerr.SaslAuthenticationFailed, `simtel_broker_auth_failures_total{mechanism="PLAIN",reason="bad_credentials"}`},
		{scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(), kerr.UnsupportedSaslMechanism, `simtel_broker_auth_failures_total{mechanism="SCRAM-SHA-256",reason="unsupported_mechanism"}`},
		{oauth.Auth{Token: sb.token(t, "alice", time.Now().Add(-time.Minute))}.AsMechanism(), kerr.SaslAuthenticationFailed, `simtel_broker_auth_failures_total{mechanism="OAUTHBEARER",reason="bad_token"}`},
	} {
		err := ping(tc.m)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.m.Name(), err, tc.want)
		}
		if tc.series != "" && sb.metric(t, tc.series) < 1 {
			t.Errorf("%s: %s not counted", tc.m.Name(), tc.series)
		}
	}
	// The refusals did not hold up a good client from the same address
	// for longer than the bounded delay.
	start := time.Now()
	if err := ping(scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()); err != nil {
		t.Fatalf("good credentials after refusals: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("authenticating after refusals took %v", d)
	}
}

// rawSASL authenticates a raw connection with PLAIN over SaslHandshake v1
// and SaslAuthenticate v1, and returns the answer.
func rawSASL(r *rawConn, user, pass string, corr int32) *kmsg.SASLAuthenticateResponse {
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	if resp := r.roundTrip(hs, corr).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
		r.t.Fatalf("handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.Version, a.SASLAuthBytes = 1, []byte("\x00"+user+"\x00"+pass)
	return r.roundTrip(a, corr+1).(*kmsg.SASLAuthenticateResponse)
}

func TestSASLGate(t *testing.T) {
	sb := startSASLBroker(t)
	meta := kmsg.NewPtrMetadataRequest()
	meta.Version = 4

	// ApiVersions is answered before authentication; anything else
	// closes the connection.
	r := dialRaw(t, sb.SASL)
	av := kmsg.NewPtrApiVersionsRequest()
	if resp := r.roundTrip(av, 1).(*kmsg.ApiVersionsResponse); resp.ErrorCode != 0 || len(resp.ApiKeys) == 0 {
		t.Fatalf("ApiVersions before authentication: %+v", resp)
	}
	r.sendFrame(requestBody(produceReq("gated", batch(t, "x")), 2))
	r.expectClosed()
	if n := sb.metric(t, `simtel_broker_auth_failures_total{mechanism="none",reason="unauthenticated_request"}`); n != 1 {
		t.Errorf("unauthenticated requests counted %v, want 1", n)
	}

	// SaslAuthenticate without a handshake: ILLEGAL_SASL_STATE, closed.
	r = dialRaw(t, sb.SASL)
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.Version, a.SASLAuthBytes = 1, []byte("\x00alice\x00alice-secret")
	if resp := r.roundTrip(a, 1).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("authenticate without handshake: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	r.expectClosed()

	// A malformed PLAIN message fails and closes.
	r = dialRaw(t, sb.SASL)
	if resp := rawSASL(r, "alice", "", 1); resp.ErrorCode != kerr.SaslAuthenticationFailed.Code || resp.ErrorMessage == nil {
		t.Fatalf("empty password: %v %v", kerr.ErrorForCode(resp.ErrorCode), resp.ErrorMessage)
	}
	r.expectClosed()

	// Re-authenticating as someone else fails.
	r = dialRaw(t, sb.SASL)
	if resp := rawSASL(r, "alice", "alice-secret", 1); resp.ErrorCode != 0 || resp.SessionLifetimeMillis != 0 {
		t.Fatalf("PLAIN: %v, lifetime %d (none configured)", kerr.ErrorForCode(resp.ErrorCode), resp.SessionLifetimeMillis)
	}
	if resp := r.roundTrip(meta, 3).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 || resp.Brokers[0].Port != int32(portOf(t, sb.SASL)) {
		t.Fatalf("metadata after authentication: %+v", resp.Brokers)
	}
	if resp := rawSASL(r, "bob", "x", 4); resp.ErrorCode != kerr.SaslAuthenticationFailed.Code {
		t.Fatalf("re-authentication as another user: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	r.expectClosed()

	// The plaintext listener has no SASL.
	r = dialRaw(t, sb.Addr)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "PLAIN"
	if resp := r.roundTrip(hs, 1).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("handshake on PLAINTEXT: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A v0 handshake is followed by bare SASL tokens, without Kafka headers.
func TestSASLHandshakeV0RawTokens(t *testing.T) {
	sb := startSASLBroker(t)
	rawToken := func(r *rawConn, token string) ([]byte, error) {
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(token)))
		if _, err := r.c.Write(append(frame, token...)); err != nil {
			return nil, err
		}
		_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var sz [4]byte
		if _, err := io.ReadFull(r.c, sz[:]); err != nil {
			return nil, err
		}
		buf := make([]byte, binary.BigEndian.Uint32(sz[:]))
		_, err := io.ReadFull(r.c, buf)
		return buf, err
	}
	handshake := func(r *rawConn, mech string) {
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 0, mech
		if resp := r.roundTrip(hs, 1).(*kmsg.SASLHandshakeResponse); resp.ErrorCode != 0 {
			t.Fatalf("handshake v0: %v", kerr.ErrorForCode(resp.ErrorCode))
		}
	}

	r := dialRaw(t, sb.SASL)
	handshake(r, "PLAIN")
	if answer, err := rawToken(r, "\x00alice\x00alice-secret"); err != nil || len(answer) != 0 {
		t.Fatalf("raw PLAIN: answer %q, %v", answer, err)
	}
	meta := kmsg.NewPtrMetadataRequest()
	if resp := r.roundTrip(meta, 2).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
		t.Fatalf("metadata after raw authentication: %+v", resp)
	}

	// SCRAM's two round trips as bare frames, with franz-go's client side.
	r = dialRaw(t, sb.SASL)
	handshake(r, "SCRAM-SHA-512")
	sess, msg, err := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism().Authenticate(context.Background(), sb.SASL)
	if err != nil {
		t.Fatal(err)
	}
	for done := false; !done; {
		answer, err := rawToken(r, string(msg))
		if err != nil {
			t.Fatalf("raw SCRAM: %v", err)
		}
		if done, msg, err = sess.Challenge(answer); err != nil {
			t.Fatalf("raw SCRAM: server answer refused: %v", err)
		}
	}
	if resp := r.roundTrip(meta, 2).(*kmsg.MetadataResponse); len(resp.Brokers) != 1 {
		t.Fatalf("metadata after raw SCRAM: %+v", resp)
	}

	// A wrong password closes the connection (there is no error field).
	r = dialRaw(t, sb.SASL)
	handshake(r, "PLAIN")
	if answer, err := rawToken(r, "\x00alice\x00wrong"); err == nil {
		t.Fatalf("wrong password answered %q", answer)
	}
}

// franz-go re-authenticates before the session lifetime ends, so a
// consumer outlives many sessions on one connection; a client that does
// not re-authenticate is disconnected at its next request.
func TestSASLSessionLifetime(t *testing.T) {
	const lifetime = 2 * time.Second
	sb := startSASLBroker(t, func(c *broker.Config) { c.SASL.SessionLifetime = lifetime })

	r := dialRaw(t, sb.SASL)
	resp := rawSASL(r, "alice", "alice-secret", 1)
	if resp.ErrorCode != 0 || resp.SessionLifetimeMillis <= 0 || resp.SessionLifetimeMillis > lifetime.Milliseconds() {
		t.Fatalf("session lifetime %dms, want (0, %d]", resp.SessionLifetimeMillis, lifetime.Milliseconds())
	}
	meta := kmsg.NewPtrMetadataRequest()
	r.roundTrip(meta, 3)
	time.Sleep(lifetime + 500*time.Millisecond)
	r.sendFrame(requestBody(meta, 4))
	r.expectClosed()
	if n := sb.metric(t, `simtel_broker_auth_failures_total{mechanism="PLAIN",reason="session_expired"}`); n != 1 {
		t.Errorf("expired sessions counted %v, want 1", n)
	}

	// An OAUTHBEARER session ends with its token, if that is sooner.
	r = dialRaw(t, sb.SASL)
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Version, hs.Mechanism = 1, "OAUTHBEARER"
	r.roundTrip(hs, 1)
	a := kmsg.NewPtrSASLAuthenticateRequest()
	a.Version = 1
	a.SASLAuthBytes = []byte("n,,\x01auth=Bearer " + sb.token(t, "alice", time.Now().Add(time.Second)) + "\x01\x01")
	if resp := r.roundTrip(a, 2).(*kmsg.SASLAuthenticateResponse); resp.ErrorCode != 0 || resp.SessionLifetimeMillis > 1000 {
		t.Fatalf("token session: %v, lifetime %dms, want at most the token's 1000", kerr.ErrorForCode(resp.ErrorCode), resp.SessionLifetimeMillis)
	}

	const topic = "reauth"
	before := sb.metric(t, `simtel_broker_requests_total{api="SASLAuthenticate"}`)
	m := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()
	prod := sb.client(t, m, kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	cons := sb.client(t, m, kgo.ConsumeTopics(topic))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 20
	got := 0
	for i := range n {
		if err := prod.ProduceSync(ctx, kgo.StringRecord(fmt.Sprint(i))).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
		for got <= i {
			fs := cons.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("fetch after %d records: %v", got, err)
			}
			got += len(fs.Records())
		}
		time.Sleep(400 * time.Millisecond) // n of them span several lifetimes
	}
	if n := sb.metric(t, `simtel_broker_auth_failures_total{mechanism="SCRAM-SHA-512",reason="session_expired"}`); n != 0 {
		t.Errorf("%v sessions expired: the clients did not re-authenticate in time", n)
	}
	// Each SCRAM exchange is two SaslAuthenticate requests; 8 s of two
	// clients with 2 s sessions re-authenticate several times.
	if auths := sb.metric(t, `simtel_broker_requests_total{api="SASLAuthenticate"}`) - before; auths < 12 {
		t.Errorf("%v SaslAuthenticate requests, want at least 12 (re-authentications)", auths)
	}
}

func TestSASLKcatSCRAM(t *testing.T) {
	kcatPath(t)
	sb := startSASLBroker(t)
	args := func(pass string, rest ...string) []string {
		return append([]string{"-b", sb.SASL, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "sasl.username=alice", "-X", "sasl.password=" + pass}, rest...)
	}
	runKcat(t, "one\ntwo\n", args("alice-secret", "-P", "-t", "kcat-sasl")...)
	if out := runKcat(t, "", args("alice-secret", "-C", "-t", "kcat-sasl", "-e", "-f", "%s\n")...); out != "one\ntwo\n" {
		t.Fatalf("consumed %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcatPath(t), args("wrong", "-L", "-m", "5")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Authentication failed") {
		t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
	}
}

// SASL_SSL: SCRAM inside TLS, with franz-go and with librdkafka.
func TestSASLOverTLS(t *testing.T) {
	ca := testutil.NewCA(t)
	srv := ca.Server(t, "broker")
	secure := testutil.FreePort(t)
	startSASLBroker(t, func(c *broker.Config) {
		c.Listeners = append(c.Listeners, broker.ListenerSpec{Name: "secure", Proto: broker.ProtoSASLSSL, Addr: secure})
		c.TLS = tlsfiles.Files{Cert: srv.CertFile, Key: srv.KeyFile}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good := scram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism()
	cl, err := kgo.NewClient(kgo.SeedBrokers(secure), kgo.DialTLSConfig(ca.ClientTLS()), kgo.SASL(good),
		kgo.DefaultProduceTopic("sasl-ssl"), kgo.ConsumeTopics("sasl-ssl"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, kgo.StringRecord("over tls")).FirstErr(); err != nil {
		t.Fatalf("produce over SASL_SSL: %v", err)
	}
	if fs := cl.PollFetches(ctx); fs.Err0() != nil || len(fs.Records()) != 1 {
		t.Fatalf("consume over SASL_SSL: %v %v", fs.Err0(), fs.Records())
	}
	bad, err := kgo.NewClient(kgo.SeedBrokers(secure), kgo.DialTLSConfig(ca.ClientTLS()), kgo.SASL(scram.Auth{User: "alice", Pass: "nope"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password over SASL_SSL: got %v, want SASL_AUTHENTICATION_FAILED", err)
	}

	kcatPath(t)
	args := func(pass string, rest ...string) []string {
		return append([]string{"-b", secure, "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + ca.CAFile,
			"-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice", "-X", "sasl.password=" + pass}, rest...)
	}
	runKcat(t, "three\n", args("alice-secret", "-P", "-t", "sasl-ssl")...)
	if out := runKcat(t, "", args("alice-secret", "-C", "-t", "sasl-ssl", "-e", "-f", "%s\n")...); out != "over tls\nthree\n" {
		t.Fatalf("kcat consumed %q over SASL_SSL", out)
	}
	out, err := exec.CommandContext(ctx, kcatPath(t), args("wrong", "-L", "-m", "5")...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Authentication failed") {
		t.Fatalf("kcat with a wrong password over SASL_SSL: %v\n%s", err, out)
	}
}

func TestSASLConfigErrors(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.key")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	saslListener := []broker.ListenerSpec{{Name: "s", Proto: broker.ProtoSASLPlaintext, Addr: "127.0.0.1:0"}}
	for _, tc := range []struct {
		name      string
		listeners []broker.ListenerSpec
		sasl      broker.SASLConfig
		want      string
	}{
		{"no mechanisms", saslListener, broker.SASLConfig{}, "needs --sasl-mechanisms"},
		{"no SASL listener", nil, broker.SASLConfig{Mechanisms: []string{"PLAIN"}}, "needs a SASL_PLAINTEXT or SASL_SSL listener"},
		{"unknown mechanism", saslListener, broker.SASLConfig{Mechanisms: []string{"GSSAPI"}}, `unknown SASL mechanism "GSSAPI"`},
		{"OAUTHBEARER without keys", saslListener, broker.SASLConfig{Mechanisms: []string{"OAUTHBEARER"}}, "OAUTHBEARER needs"},
		{"token flags without OAUTHBEARER", saslListener, broker.SASLConfig{Mechanisms: []string{"PLAIN"}, OAuthUnsecured: true}, "need OAUTHBEARER"},
		{"short HMAC key", saslListener, broker.SASLConfig{Mechanisms: []string{"OAUTHBEARER"}, OAuthHMACKeyFile: short}, "use 32 or more"},
		{"missing JWKS", saslListener, broker.SASLConfig{Mechanisms: []string{"OAUTHBEARER"}, OAuthJWKSFile: short + ".missing"}, "cannot read the OAUTHBEARER JWKS"},
		{"negative lifetime", saslListener, broker.SASLConfig{Mechanisms: []string{"PLAIN"}, SessionLifetime: -time.Second}, "negative"},
	} {
		b, err := broker.New(broker.Config{DataDir: t.TempDir(), Listeners: tc.listeners, SASL: tc.sasl})
		if err == nil {
			b.Close()
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %q, want it to say %q", tc.name, err, tc.want)
		}
	}
}
