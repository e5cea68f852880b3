package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/simtel/simtel/broker/auth"
)

// exchange runs franz-go's client side of a mechanism against the
// server's session, message by message, as the broker relays them.
func exchange(t *testing.T, srv *auth.SASLServer, m sasl.Mechanism) (*auth.SASLResult, error) {
	t.Helper()
	sess, ok := srv.Start(m.Name())
	if !ok {
		t.Fatalf("mechanism %s is not enabled", m.Name())
	}
	cs, msg, err := m.Authenticate(context.Background(), "broker:9092")
	if err != nil {
		t.Fatalf("client start: %v", err)
	}
	for range 4 {
		answer, res, err := sess.Step(msg)
		if err != nil || res != nil {
			if res != nil {
				// The client checks the server's last message (SCRAM's
				// server signature) before it trusts the session.
				if _, _, cerr := cs.Challenge(answer); cerr != nil {
					t.Fatalf("client refused the server's final message: %v", cerr)
				}
			}
			return res, err
		}
		var done bool
		done, msg, err = cs.Challenge(answer)
		if err != nil {
			t.Fatalf("client step: %v", err)
		}
		if done {
			t.Fatalf("client finished before the server")
		}
	}
	t.Fatalf("exchange did not end")
	return nil, nil
}

func testServer(t *testing.T, creds auth.CredentialStore, v *auth.TokenValidator) *auth.SASLServer {
	t.Helper()
	mechs := []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
	if v != nil {
		mechs = append(mechs, "OAUTHBEARER")
	}
	srv, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: mechs, Credentials: creds, OAuth: v})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

func testCredentials(t *testing.T) auth.CredentialMap {
	t.Helper()
	creds := auth.CredentialMap{}
	for _, m := range []auth.ScramMechanism{auth.ScramSHA256, auth.ScramSHA512} {
		if err := creds.Add("alice", "s3cret,=pw", m, 4096); err != nil {
			t.Fatal(err)
		}
	}
	if err := creds.Add("bob=,x", "hunter2", auth.ScramSHA256, 8192); err != nil {
		t.Fatal(err)
	}
	return creds
}

func wantFailure(t *testing.T, err error, reason string) {
	t.Helper()
	var se *auth.SASLError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a SASL failure (%s)", err, reason)
	}
	if se.Reason != reason {
		t.Fatalf("got reason %q (%v), want %q", se.Reason, se, reason)
	}
}

func TestSCRAMWithFranzClient(t *testing.T) {
	srv := testServer(t, testCredentials(t), nil)
	for _, tc := range []struct {
		user, pass string
		sha512     bool
		reason     string // empty: authenticates
	}{
		{user: "alice", pass: "s3cret,=pw"},
		{user: "alice", pass: "s3cret,=pw", sha512: true},
		{user: "bob=,x", pass: "hunter2"},
		{user: "alice", pass: "wrong", reason: auth.ReasonBadCredentials},
		{user: "alice", pass: "wrong", sha512: true, reason: auth.ReasonBadCredentials},
		{user: "mallory", pass: "x", reason: auth.ReasonBadCredentials},
		{user: "bob=,x", pass: "hunter2", sha512: true, reason: auth.ReasonBadCredentials}, // no 512 credential
	} {
		a := scram.Auth{User: tc.user, Pass: tc.pass}
		m := a.AsSha256Mechanism()
		if tc.sha512 {
			m = a.AsSha512Mechanism()
		}
		t.Run(fmt.Sprintf("%s/%s/%s", m.Name(), tc.user, tc.pass), func(t *testing.T) {
			res, err := exchange(t, srv, m)
			if tc.reason != "" {
				wantFailure(t, err, tc.reason)
				if strings.Contains(err.(*auth.SASLError).Message, tc.user) {
					t.Errorf("the client's message %q names the user", err.(*auth.SASLError).Message)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Principal != auth.User(tc.user) || !res.Expires.IsZero() {
				t.Fatalf("got %+v, want principal User:%s without expiry", res, tc.user)
			}
		})
	}
}

// An unknown user is answered like a known one with a wrong password: a
// salt and the minimum iterations at the first step, a failure at the proof.
func TestSCRAMUnknownUserLooksKnown(t *testing.T) {
	srv := testServer(t, testCredentials(t), nil)
	first := func(user string) string {
		s, _ := srv.Start("SCRAM-SHA-256")
		answer, res, err := s.Step([]byte("n,,n=" + user + ",r=abcdefgh"))
		if err != nil || res != nil {
			t.Fatalf("first step for %s: %v %v", user, res, err)
		}
		return string(answer)
	}
	a, b := first("nobody"), first("nobody")
	if !strings.HasPrefix(a, "r=abcdefgh") || !strings.HasSuffix(a, ",i=4096") {
		t.Fatalf("server-first %q", a)
	}
	salt := func(s string) string { return strings.Split(s, ",")[1] }
	if salt(a) != salt(b) {
		t.Fatalf("an unknown user's salt changes between attempts (%s, %s): that tells it apart", salt(a), salt(b))
	}
}

func TestSCRAMBadExchange(t *testing.T) {
	srv := testServer(t, testCredentials(t), nil)
	for _, tc := range []struct {
		name   string
		first  string
		final  func(serverFirst string) string
		reason string
	}{
		{name: "channel binding required", first: "p=tls-unique,,n=alice,r=abc", reason: auth.ReasonMalformed},
		{name: "empty", first: "", reason: auth.ReasonMalformed},
		{name: "no gs2", first: "n=alice,r=abc", reason: auth.ReasonMalformed},
		{name: "bad escape", first: "n,,n=al=ice,r=abc", reason: auth.ReasonMalformed},
		{name: "authzid other user", first: "n,a=bob,n=alice,r=abc", reason: auth.ReasonAuthzidNotUsername},
		{name: "comma in nonce", first: "n,,n=alice,r=", reason: auth.ReasonMalformed},
		{name: "wrong binding", first: "n,,n=alice,r=abc", final: func(sf string) string {
			return "c=eSws,r=" + nonce(sf) + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 32))
		}, reason: auth.ReasonMalformed},
		{name: "wrong nonce", first: "n,,n=alice,r=abc", final: func(string) string {
			return "c=biws,r=abcdef,p=" + base64.StdEncoding.EncodeToString(make([]byte, 32))
		}, reason: auth.ReasonMalformed},
		{name: "long proof", first: "n,,n=alice,r=abc", final: func(sf string) string {
			return "c=biws,r=" + nonce(sf) + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 64))
		}, reason: auth.ReasonMalformed},
		{name: "zero proof", first: "n,,n=alice,r=abc", final: func(sf string) string {
			return "c=biws,r=" + nonce(sf) + ",p=" + base64.StdEncoding.EncodeToString(make([]byte, 32))
		}, reason: auth.ReasonBadCredentials},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := srv.Start("SCRAM-SHA-256")
			answer, _, err := s.Step([]byte(tc.first))
			if tc.final == nil {
				wantFailure(t, err, tc.reason)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, res, err := s.Step([]byte(tc.final(string(answer))))
			if res != nil {
				t.Fatalf("authenticated %+v", res)
			}
			wantFailure(t, err, tc.reason)
		})
	}
}

func nonce(serverFirst string) string {
	return strings.TrimPrefix(strings.Split(serverFirst, ",")[0], "r=")
}

func TestPlainChecksSCRAMCredentials(t *testing.T) {
	srv := testServer(t, testCredentials(t), nil)
	for _, tc := range []struct {
		zid, user, pass string
		reason          string
	}{
		{user: "alice", pass: "s3cret,=pw"},
		{zid: "alice", user: "alice", pass: "s3cret,=pw"},
		{user: "bob=,x", pass: "hunter2"}, // only a SHA-256 credential
		{user: "alice", pass: "s3cret,=pW", reason: auth.ReasonBadCredentials},
		{user: "nobody", pass: "x", reason: auth.ReasonBadCredentials},
		{zid: "bob=,x", user: "alice", pass: "s3cret,=pw", reason: auth.ReasonAuthzidNotUsername},
	} {
		res, err := exchange(t, srv, plain.Auth{Zid: tc.zid, User: tc.user, Pass: tc.pass}.AsMechanism())
		if tc.reason != "" {
			wantFailure(t, err, tc.reason)
			continue
		}
		if err != nil || res.Principal != auth.User(tc.user) {
			t.Errorf("%s/%s: got %+v, %v", tc.user, tc.pass, res, err)
		}
	}
	for _, msg := range []string{"", "alice", "\x00alice", "\x00alice\x00", "\x00\x00pw", "a\x00b\x00c\x00d", "\x00alice\x00\xff"} {
		s, _ := srv.Start("PLAIN")
		_, _, err := s.Step([]byte(msg))
		wantFailure(t, err, auth.ReasonMalformed)
	}
}

func TestNewScramCredential(t *testing.T) {
	for _, it := range []int{4095, 16385, 0} {
		if _, err := auth.NewScramCredential(auth.ScramSHA256, "pw", it); err == nil {
			t.Errorf("iterations %d: accepted", it)
		}
	}
	if _, err := auth.NewScramCredential(3, "pw", 4096); err == nil {
		t.Error("unknown mechanism accepted")
	}
	a, err := auth.NewScramCredential(auth.ScramSHA512, "pw", 4096)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := auth.NewScramCredential(auth.ScramSHA512, "pw", 4096)
	if string(a.Salt) == string(b.Salt) || len(a.StoredKey) != 64 || len(a.ServerKey) != 64 {
		t.Fatalf("credentials %+v, %+v: want fresh salts and 64-byte keys", a, b)
	}
	if !a.VerifyPassword("pw") || a.VerifyPassword("pw ") {
		t.Fatal("VerifyPassword does not tell the password apart")
	}
}

// token signs claims with method and key; with method none it makes an
// unsecured token as franz-go's test does.
func token(t *testing.T, method jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	if method == jwt.SigningMethodNone {
		enc := base64.RawURLEncoding.EncodeToString
		body, _ := json.Marshal(claims)
		return enc([]byte(`{"alg":"none"}`)) + "." + enc(body) + "."
	}
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwks(t *testing.T, rk *rsa.PublicKey, ek *ecdsa.PublicKey) []byte {
	t.Helper()
	enc := base64.RawURLEncoding.EncodeToString
	ecb, err := ek.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]any{"keys": []map[string]string{
		{"kty": "RSA", "kid": "r1", "use": "sig", "n": enc(rk.N.Bytes()), "e": enc(big.NewInt(int64(rk.E)).Bytes())},
		{"kty": "EC", "kid": "e1", "crv": "P-256", "x": enc(ecb[1:33]), "y": enc(ecb[33:])},
		{"kty": "oct", "kid": "ignored", "k": "AAAA"},
	}}
	b, _ := json.Marshal(set)
	return b
}

func TestOAuthBearerTokens(t *testing.T) {
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherRSA, _ := rsa.GenerateKey(rand.Reader, 2048)
	now := time.Unix(1_800_000_000, 0)
	hmacKey := []byte("0123456789abcdef0123456789abcdef")
	base := auth.TokenConfig{HMACKey: hmacKey, JWKS: jwks(t, &rk.PublicKey, &ek.PublicKey), Now: func() time.Time { return now }}
	exp := now.Add(time.Hour).Unix()
	claims := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{"sub": "alice", "exp": exp}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(c, kv[i].(string))
				continue
			}
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	for _, tc := range []struct {
		name      string
		cfg       func(*auth.TokenConfig)
		token     string
		principal string // empty: refused
	}{
		{name: "HS256", token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims()), principal: "alice"},
		{name: "RS256 by kid", token: token(t, jwt.SigningMethodRS256, rk, "r1", claims()), principal: "alice"},
		{name: "RS256 without kid", token: token(t, jwt.SigningMethodRS256, rk, "", claims()), principal: "alice"},
		{name: "ES256", token: token(t, jwt.SigningMethodES256, ek, "e1", claims()), principal: "alice"},
		{name: "RS256 other key", token: token(t, jwt.SigningMethodRS256, otherRSA, "r1", claims())},
		{name: "RS256 unknown kid", token: token(t, jwt.SigningMethodRS256, rk, "r2", claims())},
		{name: "HS256 wrong key", token: token(t, jwt.SigningMethodHS256, []byte("other"), "", claims())},
		{name: "HS384 not accepted", token: token(t, jwt.SigningMethodHS384, hmacKey, "", claims())},
		{name: "none refused", token: token(t, jwt.SigningMethodNone, nil, "", claims())},
		{name: "none in unsecured mode", cfg: func(c *auth.TokenConfig) { c.Unsecured = true }, token: token(t, jwt.SigningMethodNone, nil, "", claims()), principal: "alice"},
		{name: "expired", token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("exp", now.Add(-time.Second).Unix()))},
		{name: "no exp", token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("exp", nil))},
		{name: "not yet valid", token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("nbf", now.Add(time.Minute).Unix()))},
		{name: "no sub", token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("sub", nil))},
		{name: "audience", cfg: func(c *auth.TokenConfig) { c.Audience = "simtel" }, token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("aud", []string{"x", "simtel"})), principal: "alice"},
		{name: "wrong audience", cfg: func(c *auth.TokenConfig) { c.Audience = "simtel" }, token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("aud", "other"))},
		{name: "issuer", cfg: func(c *auth.TokenConfig) { c.Issuer = "slurm" }, token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("iss", "slurm")), principal: "alice"},
		{name: "wrong issuer", cfg: func(c *auth.TokenConfig) { c.Issuer = "slurm" }, token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("iss", "evil"))},
		{name: "principal claim", cfg: func(c *auth.TokenConfig) { c.PrincipalClaim = "sun" }, token: token(t, jwt.SigningMethodHS256, hmacKey, "", claims("sun", "bob")), principal: "bob"},
		{name: "garbage", token: "not.a.jwt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			v, err := auth.NewTokenValidator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			res, err := exchange(t, testServer(t, auth.CredentialMap{}, v), oauth.Auth{Token: tc.token}.AsMechanism())
			if tc.principal == "" {
				wantFailure(t, err, auth.ReasonBadToken)
				if msg := err.(*auth.SASLError).Message; !strings.Contains(msg, "invalid_token") {
					t.Fatalf("message %q lacks invalid_token", msg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Principal != auth.User(tc.principal) || res.Expires.Unix() != exp {
				t.Fatalf("got %+v, want User:%s expiring at %d", res, tc.principal, exp)
			}
		})
	}
}

func TestOAuthBearerMessages(t *testing.T) {
	for _, tc := range []struct {
		msg, zid, token string
	}{
		{msg: "n,,\x01auth=Bearer abc\x01\x01", token: "abc"},
		{msg: "n,a=bob,\x01host=x\x01auth=bearer a.b.c\x01port=9\x01\x01", zid: "bob", token: "a.b.c"},
		{msg: "y,,\x01auth=Bearer t\x01\x01", token: "t"},
	} {
		zid, tok, err := auth.ParseOAuthBearer(tc.msg)
		if err != nil || zid != tc.zid || tok != tc.token {
			t.Errorf("%q: got %q %q %v, want %q %q", tc.msg, zid, tok, err, tc.zid, tc.token)
		}
	}
	for _, msg := range []string{"", "n,,", "n,,\x01\x01", "p=x,,\x01auth=Bearer t\x01\x01", "n,,\x01auth=Bearer t\x01", "n,,\x01auth=Basic t\x01\x01",
		"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01", "n,,\x01auth=Bearer \x01\x01", "n,,\x01=x\x01auth=Bearer t\x01\x01", "n,,\x01auth=Bearer t\x00\x01\x01"} {
		if _, _, err := auth.ParseOAuthBearer(msg); err == nil {
			t.Errorf("%q: accepted", msg)
		}
	}
}

func TestParseJWKSRefusesBadKeys(t *testing.T) {
	weak, _ := rsa.GenerateKey(rand.Reader, 1024)
	enc := base64.RawURLEncoding.EncodeToString
	for _, set := range []string{
		`{`,
		`{"keys":[]}`,
		`{"keys":[{"kty":"oct","k":"AAAA"}]}`,
		`{"keys":[{"kty":"RSA","n":"!!","e":"AQAB"}]}`,
		`{"keys":[{"kty":"RSA","n":"` + enc(weak.N.Bytes()) + `","e":"AQAB"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"AAAA","y":"AAAA"}]}`,
		`{"keys":[{"kty":"EC","crv":"P-256","x":"` + enc(make([]byte, 32)) + `","y":"` + enc(make([]byte, 32)) + `"}]}`,
	} {
		if _, _, err := auth.ParseJWKS([]byte(set)); err == nil {
			t.Errorf("%s: accepted", set)
		}
	}
}

func TestSASLServerConfig(t *testing.T) {
	if _, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: []string{"PLAIN"}}); err == nil {
		t.Error("PLAIN without a credential store accepted")
	}
	if _, err := auth.NewSASLServer(auth.SASLConfig{Mechanisms: []string{"OAUTHBEARER"}, Credentials: auth.CredentialMap{}}); err == nil {
		t.Error("OAUTHBEARER without a validator accepted")
	}
	if _, err := auth.NewTokenValidator(auth.TokenConfig{}); err == nil {
		t.Error("a validator without keys accepted")
	}
	got, err := auth.ParseMechanisms([]string{"plain, SCRAM-SHA-512", "PLAIN"})
	if err != nil || strings.Join(got, ",") != "PLAIN,SCRAM-SHA-512" {
		t.Errorf("ParseMechanisms: %v %v", got, err)
	}
	if _, err := auth.ParseMechanisms([]string{"GSSAPI"}); err == nil {
		t.Error("GSSAPI accepted")
	}
	srv := testServer(t, auth.CredentialMap{}, nil)
	if _, ok := srv.Start("OAUTHBEARER"); ok {
		t.Error("a mechanism that is not enabled started")
	}
}
