package server

// SASL authentication on the SASL_PLAINTEXT and SASL_SSL listeners.
//
// A connection on such a listener starts unauthenticated: it may send
// ApiVersions, SaslHandshake (17_sasl_handshake.go) and SaslAuthenticate
// (36_sasl_authenticate.go) and nothing else; any other request closes it,
// as Kafka does. The mechanisms themselves are package auth's; this file
// keeps a connection's side of the exchange, all of it touched only by the
// connection's read loop (the SASL handlers run inline there, never in a
// goroutine), so it needs no lock:
//
//  1. SaslHandshake picks a mechanism and starts an exchange. After a v0
//     handshake the client sends the exchange's tokens as bare
//     size-prefixed frames, without Kafka headers, and gets bare frames
//     back (readRawSASL); after v1 it wraps them in SaslAuthenticate.
//  2. When the exchange ends the connection takes its principal and a
//     session that ends after SASL.SessionLifetime, or when an OAUTHBEARER
//     token expires if sooner. SaslAuthenticate v1+ tells the client the
//     remaining lifetime, and the client re-authenticates on the same
//     connection before it ends (KIP-368) with the same mechanism and
//     principal. A request other than the SASL ones after the end closes
//     the connection.
//  3. A failed exchange is answered (SASL_AUTHENTICATION_FAILED with a
//     message, or UNSUPPORTED_SASL_MECHANISM), logged with the peer
//     address, counted in simtel_broker_auth_failures_total, and the
//     connection is closed once the answer is written. The answer is
//     delayed the more the longer one address keeps failing
//     (failureDelays), which slows down password guessing without
//     holding up any other connection.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/simtel/simtel/broker/auth"
)

// SASLConfig configures the SASL listeners.
type SASLConfig struct {
	// Mechanisms are the mechanisms the SASL_PLAINTEXT and SASL_SSL
	// listeners offer (--sasl-mechanisms), from PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512 and OAUTHBEARER. Required with a SASL listener.
	Mechanisms []string
	// Credentials are the SCRAM credentials PLAIN and SCRAM check.
	// Default: the broker's own (the cluster's replicated state, or a
	// single broker's data directory), which AlterUserScramCredentials and
	// `simtel user add` change; the broker sets it before New.
	Credentials auth.CredentialStore

	// OAuthHMACKeyFile holds the shared key verifying HS256 tokens (the
	// whole file's bytes, as Slurm's jwt_hs256.key).
	OAuthHMACKeyFile string
	// OAuthJWKSFile is a JSON Web Key Set whose RSA and P-256 keys verify
	// RS256 and ES256 tokens.
	OAuthJWKSFile string
	// OAuthAudience and OAuthIssuer, when set, must match the token's aud
	// and iss.
	OAuthAudience string
	OAuthIssuer   string
	// OAuthPrincipalClaim names the claim holding the user. Default "sub".
	OAuthPrincipalClaim string
	// OAuthUnsecured accepts unsigned tokens (alg none): for tests only.
	OAuthUnsecured bool

	// SessionLifetime is how long an authentication holds before the
	// client must re-authenticate (connections.max.reauth.ms). 0: until
	// the connection closes (an OAUTHBEARER session still ends when its
	// token expires).
	SessionLifetime time.Duration
}

// Validate checks the SASL settings against the listeners.
func (c *SASLConfig) Validate(listeners []ListenerSpec) error {
	mechs, err := auth.ParseMechanisms(c.Mechanisms)
	if err != nil {
		return fmt.Errorf("--sasl-mechanisms: %w", err)
	}
	c.Mechanisms = mechs
	saslListener := slices.ContainsFunc(listeners, func(l ListenerSpec) bool { return isSASL(l.Proto) })
	switch {
	case saslListener && len(mechs) == 0:
		return errors.New("a SASL_PLAINTEXT or SASL_SSL listener needs --sasl-mechanisms (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
	case !saslListener && len(mechs) > 0:
		return errors.New("--sasl-mechanisms needs a SASL_PLAINTEXT or SASL_SSL listener (--listeners name=SASL_PLAINTEXT://host:port)")
	}
	oauth := c.OAuthHMACKeyFile != "" || c.OAuthJWKSFile != "" || c.OAuthUnsecured
	if slices.Contains(mechs, auth.MechanismOAuthBearer) != oauth {
		if oauth {
			return errors.New("the --sasl-oauthbearer flags need OAUTHBEARER in --sasl-mechanisms")
		}
		return errors.New("OAUTHBEARER needs --sasl-oauthbearer-hmac-key-file, --sasl-oauthbearer-jwks-file or --sasl-oauthbearer-unsecured")
	}
	if c.SessionLifetime < 0 {
		return fmt.Errorf("--sasl-session-lifetime %v is negative", c.SessionLifetime)
	}
	return nil
}

func isSASL(proto string) bool { return proto == ProtoSASLPlaintext || proto == ProtoSASLSSL }

// saslState is the server's side of SASL: the mechanisms (nil without a
// SASL listener) and the failure delays.
type saslState struct {
	srv      *auth.SASLServer
	lifetime time.Duration
	delays   *failureDelays
}

// newSASL builds the mechanisms, reading the OAUTHBEARER key files.
func newSASL(cfg SASLConfig, log *slog.Logger) (*saslState, error) {
	s := &saslState{lifetime: cfg.SessionLifetime, delays: newFailureDelays()}
	if len(cfg.Mechanisms) == 0 {
		return s, nil
	}
	sc := auth.SASLConfig{Mechanisms: cfg.Mechanisms, Credentials: cfg.Credentials}
	if slices.Contains(cfg.Mechanisms, auth.MechanismOAuthBearer) {
		tc := auth.TokenConfig{Audience: cfg.OAuthAudience, Issuer: cfg.OAuthIssuer, PrincipalClaim: cfg.OAuthPrincipalClaim, Unsecured: cfg.OAuthUnsecured}
		var err error
		if cfg.OAuthHMACKeyFile != "" {
			if tc.HMACKey, err = os.ReadFile(cfg.OAuthHMACKeyFile); err != nil {
				return nil, fmt.Errorf("cannot read the OAUTHBEARER HMAC key: %w", err)
			}
			if len(tc.HMACKey) < 32 {
				return nil, fmt.Errorf("OAUTHBEARER HMAC key %s has %d bytes: use 32 or more", cfg.OAuthHMACKeyFile, len(tc.HMACKey))
			}
		}
		if cfg.OAuthJWKSFile != "" {
			if tc.JWKS, err = os.ReadFile(cfg.OAuthJWKSFile); err != nil {
				return nil, fmt.Errorf("cannot read the OAUTHBEARER JWKS: %w", err)
			}
		}
		if sc.OAuth, err = auth.NewTokenValidator(tc); err != nil {
			return nil, fmt.Errorf("OAUTHBEARER: %w", err)
		}
		if cfg.OAuthUnsecured {
			log.Warn("OAUTHBEARER accepts unsigned tokens (--sasl-oauthbearer-unsecured): anyone can claim any principal; for tests only")
		}
	}
	var err error
	if s.srv, err = auth.NewSASLServer(sc); err != nil {
		return nil, err
	}
	return s, nil
}

// saslConn is one connection's SASL state, owned by its read loop.
type saslConn struct {
	// session is the exchange in progress, nil between exchanges;
	// mechanism is the one chosen for it.
	session   auth.SASLSession
	mechanism string
	// raw: a v0 handshake, so the exchange's tokens come as bare frames.
	raw bool
	// authenticated is set by the first successful exchange and stays set
	// through re-authentications; authMechanism is its mechanism.
	authenticated bool
	authMechanism string
	// expires ends the session (zero: never).
	expires time.Time
	// failed closes the connection once the answer to the request that
	// failed is written.
	failed error
}

// errAuthClosed is why a connection closed for authentication; its
// failure was logged where it happened.
var errAuthClosed = errors.New("connection closed for authentication")

// saslRequired reports whether the connection's listener requires SASL.
func (c *conn) saslRequired() bool { return isSASL(c.proto) }

// admit is the pre-authentication gate, called for every request before
// it is dispatched.
func (c *conn) admit(key int16) error {
	if !c.saslRequired() {
		return nil
	}
	switch key {
	case 18, 17, 36: // ApiVersions, SaslHandshake, SaslAuthenticate
		return nil
	}
	name := c.s.apis.Name(key)
	if !c.sasl.authenticated {
		c.authFailed("none", auth.ReasonUnauthenticated, name+" request before SASL authentication")
		return fmt.Errorf("%w: %s before authenticating", errAuthClosed, name)
	}
	if !c.sasl.expires.IsZero() && time.Now().After(c.sasl.expires) {
		c.authFailed(c.sasl.authMechanism, auth.ReasonSessionExpired, name+" request after the SASL session expired")
		return fmt.Errorf("%w: %s after the session expired", errAuthClosed, name)
	}
	return nil
}

// authFailed logs and counts one refused authentication.
func (c *conn) authFailed(mechanism, reason, detail string) {
	c.s.metrics.authFailures.WithLabelValues(mechanism, reason).Inc()
	c.s.log.Warn("authentication failed", "listener", c.listener, "remote", c.remote, "client_id", c.clientID,
		"mechanism", mechanism, "reason", reason, "detail", detail)
}

// failExchange ends a failed exchange: logged, counted, delayed, and the
// connection closes after the answer.
func (c *conn) failExchange(mechanism string, se *auth.SASLError) {
	c.authFailed(mechanism, se.Reason, se.Error())
	c.sasl.session = nil
	c.sasl.failed = fmt.Errorf("%w: %s", errAuthClosed, se.Reason)
	c.s.sasl.delays.wait(c.ctx, c.host)
}

// step runs one message of the exchange in progress. It returns the
// answer, or the failure to answer (the exchange is then over).
func (c *conn) step(msg []byte) ([]byte, *auth.SASLError) {
	mech := c.sasl.mechanism
	answer, res, err := c.sasl.session.Step(msg)
	if err != nil {
		se, ok := err.(*auth.SASLError)
		if !ok {
			se = &auth.SASLError{Reason: auth.ReasonMalformed, Message: "Authentication failed", Detail: err.Error()}
		}
		c.failExchange(mech, se)
		return nil, se
	}
	if res == nil {
		return answer, nil
	}
	c.sasl.session = nil
	if c.sasl.authenticated && res.Principal != c.principal {
		se := &auth.SASLError{Reason: auth.ReasonPrincipalChanged,
			Message: fmt.Sprintf("Cannot change principals during re-authentication from %s to %s", c.principal, res.Principal)}
		c.failExchange(mech, se)
		return nil, se
	}
	if !c.sasl.authenticated {
		c.s.log.Debug("authenticated", "listener", c.listener, "remote", c.remote, "mechanism", mech, "principal", res.Principal)
	}
	c.principal = res.Principal
	c.sasl.authenticated = true
	c.sasl.authMechanism = mech
	c.sasl.expires = time.Time{}
	if c.s.sasl.lifetime > 0 {
		c.sasl.expires = time.Now().Add(c.s.sasl.lifetime)
	}
	if !res.Expires.IsZero() && (c.sasl.expires.IsZero() || res.Expires.Before(c.sasl.expires)) {
		c.sasl.expires = res.Expires
	}
	return answer, nil
}

// sessionLifetimeMillis is SaslAuthenticate's session_lifetime_ms: what
// is left of the session, 0 if it does not end.
func (c *conn) sessionLifetimeMillis() int64 {
	if c.sasl.expires.IsZero() {
		return 0
	}
	return max(1, time.Until(c.sasl.expires).Milliseconds())
}

// maxRawSASLToken bounds a bare SASL frame after a v0 handshake, as
// Kafka's sasl.server.max.receive.size does.
const maxRawSASLToken = 512 << 10

// readRawSASL reads one bare token of a v0 exchange and queues its bare
// answer. A failure is answered by closing the connection, as Kafka does
// on this path (there is no error field to answer with).
func (c *conn) readRawSASL(r *frameReader) error {
	n, err := r.size()
	if err != nil {
		return err
	}
	if n > maxRawSASLToken {
		c.authFailed(c.sasl.mechanism, auth.ReasonMalformed, fmt.Sprintf("SASL token of %d bytes", n))
		return fmt.Errorf("%w: SASL token of %d bytes", errAuthClosed, n)
	}
	token := make([]byte, n)
	if _, err := io.ReadFull(r, token); err != nil {
		return err
	}
	p := &Slot{key: 36, start: time.Now(), done: make(chan struct{}), raw: true}
	select {
	case c.out <- p:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	answer, se := c.step(token)
	if se != nil {
		p.closeConn = true
		p.finish(nil)
		return c.sasl.failed
	}
	if c.sasl.session == nil {
		c.sasl.raw = false
	}
	p.rawToken = answer
	p.finish(nil)
	return nil
}

// failureDelays slows down the answers to failed authentications from an
// address that keeps failing: the n-th failure within failureWindow of
// the previous one waits failureDelayBase·2^(n-1), at most
// failureDelayMax. Only the failing connection waits.
type failureDelays struct {
	mu     sync.Mutex
	byHost map[string]*hostFailures
}

type hostFailures struct {
	n    int
	last time.Time
}

const (
	failureDelayBase = 100 * time.Millisecond
	failureDelayMax  = 3 * time.Second
	failureWindow    = time.Minute
	// failureHosts bounds the addresses remembered; past it the ones
	// quiet for a failureWindow are forgotten.
	failureHosts = 10000
)

func newFailureDelays() *failureDelays {
	return &failureDelays{byHost: map[string]*hostFailures{}}
}

// delay records a failure from host and returns how long to wait.
func (d *failureDelays) delay(host string, now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.byHost[host]
	if f == nil || now.Sub(f.last) > failureWindow {
		if len(d.byHost) >= failureHosts {
			for h, old := range d.byHost {
				if now.Sub(old.last) > failureWindow {
					delete(d.byHost, h)
				}
			}
		}
		f = &hostFailures{}
		d.byHost[host] = f
	}
	f.n++
	f.last = now
	return min(failureDelayMax, failureDelayBase<<min(f.n-1, 10))
}

// wait sleeps for host's delay or until ctx ends.
func (d *failureDelays) wait(ctx context.Context, host string) {
	t := time.NewTimer(d.delay(strings.TrimPrefix(host, "/"), time.Now()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
