package auth

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// The parsers of what an unauthenticated client sends must never panic
// and must fail only with a *SASLError or a parse error.

// fuzzServer is a SASL server offering mechanism, with user alice
// (password pw) as its only credential.
func fuzzServer(f *testing.F, mechanism string) *SASLServer {
	creds := CredentialMap{}
	if err := creds.Add("alice", "pw", ScramSHA256, MinScramIterations); err != nil {
		f.Fatal(err)
	}
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{mechanism}, Credentials: creds})
	if err != nil {
		f.Fatal(err)
	}
	return srv
}

func FuzzScramMessages(f *testing.F) {
	f.Add("n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", "c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=")
	f.Add("y,a=alice,n=alice,r=abc,ext=1", "c=eSxhPWFsaWNlLA==,r=abc,x=1,p=AAAA")
	f.Add(",,", "p=")
	f.Add("p=tls-unique,,n=a=2Cb=3D,r=x", "c=,r=,p=")
	f.Add("n,,n==,r=x", ",")
	srv := fuzzServer(f, MechanismSCRAMSHA256)
	f.Fuzz(func(t *testing.T, first, final string) {
		if cf, err := ParseScramClientFirst(first); err == nil {
			if !strings.HasSuffix(first, cf.Bare) || cf.GS2Header+cf.Bare != first {
				t.Fatalf("%q split into %q + %q", first, cf.GS2Header, cf.Bare)
			}
		}
		_, _ = ParseScramClientFinal(final)
		s, _ := srv.Start(MechanismSCRAMSHA256)
		answer, res, err := s.Step([]byte(first))
		checkStep(t, res, err)
		if err != nil {
			return
		}
		// Replay the server's nonce so the fuzzer reaches the proof check.
		final = strings.ReplaceAll(final, "NONCE", strings.TrimPrefix(strings.Split(string(answer), ",")[0], "r="))
		_, res, err = s.Step([]byte(final))
		checkStep(t, res, err)
		if res != nil {
			t.Fatalf("a fuzzed proof authenticated: %q %q", first, final)
		}
	})
}

func FuzzPlain(f *testing.F) {
	f.Add([]byte("\x00alice\x00pw"))
	f.Add([]byte("alice\x00alice\x00pw"))
	f.Add([]byte("\x00\x00"))
	srv := fuzzServer(f, MechanismPlain)
	f.Fuzz(func(t *testing.T, msg []byte) {
		s, _ := srv.Start(MechanismPlain)
		_, res, err := s.Step(msg)
		checkStep(t, res, err)
		if res != nil && !strings.HasSuffix(string(msg), "\x00alice\x00pw") {
			t.Fatalf("%q authenticated as %s", msg, res.Principal)
		}
	})
}

func FuzzOAuthBearer(f *testing.F) {
	const tok = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiIsImV4cCI6MTkwMDAwMDAwMH0."
	f.Add("n,,\x01auth=Bearer "+tok+"\x01\x01", "\x01")
	f.Add("n,a=admin,\x01auth=Bearer "+tok+"\x01host=h\x01\x01", "")
	f.Add("n,,\x01auth=Bearer eyJhbGciOiJIUzI1NiJ9.e30.AAAA\x01\x01", "\x01")
	f.Add("y,,\x01auth=Bearer a.b.c\x01\x01", "x")
	v, err := NewTokenValidator(TokenConfig{Unsecured: true, HMACKey: []byte("k"), Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	if err != nil {
		f.Fatal(err)
	}
	srv, err := NewSASLServer(SASLConfig{Mechanisms: []string{MechanismOAuthBearer}, OAuth: v})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, first, second string) {
		s, _ := srv.Start(MechanismOAuthBearer)
		answer, res, err := s.Step([]byte(first))
		checkStep(t, res, err)
		if err != nil || res != nil {
			return
		}
		if string(answer) != oauthInvalidToken {
			t.Fatalf("challenge %q", answer)
		}
		_, res, err = s.Step([]byte(second))
		checkStep(t, res, err)
		if err == nil {
			t.Fatal("the answer to a refused token did not fail the exchange")
		}
	})
}

func checkStep(t *testing.T, res *SASLResult, err error) {
	t.Helper()
	var se *SASLError
	if err != nil && !errors.As(err, &se) {
		t.Fatalf("error %v is not a *SASLError", err)
	}
	if res != nil && (err != nil || !strings.HasPrefix(string(res.Principal), "User:") || res.Principal == "User:") {
		t.Fatalf("result %+v with error %v", res, err)
	}
}
