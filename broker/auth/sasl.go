package auth

import (
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The SASL mechanisms a broker can enable (--sasl-mechanisms), by their
// SASL names.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
)

// Mechanisms lists every mechanism the broker implements.
var Mechanisms = []string{MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512, MechanismOAuthBearer}

// The reasons a SASL exchange fails, as simtel_broker_auth_failures_total
// labels them. They are few and fixed so the label set stays bounded; the
// client is told less (a wrong password and an unknown user look alike).
const (
	ReasonMalformed          = "malformed"
	ReasonBadCredentials     = "bad_credentials"
	ReasonBadToken           = "bad_token"
	ReasonUnsupportedMech    = "unsupported_mechanism"
	ReasonIllegalState       = "illegal_state"
	ReasonPrincipalChanged   = "principal_changed"
	ReasonUnauthenticated    = "unauthenticated_request"
	ReasonSessionExpired     = "session_expired"
	ReasonAuthzidNotUsername = "authzid_not_username"
)

// SASLError is a failed exchange. Message is what the client is told in
// SaslAuthenticate's error message; Reason labels the failure metric;
// Detail is for the broker's log only.
type SASLError struct {
	Reason  string
	Message string
	Detail  string
}

func (e *SASLError) Error() string {
	if e.Detail != "" {
		return e.Message + ": " + e.Detail
	}
	return e.Message
}

// SASLResult is who an exchange authenticated. Expires is when the
// credential itself ends (an OAUTHBEARER token's exp), zero if it does not.
type SASLResult struct {
	Principal Principal
	Expires   time.Time
}

// A SASLSession is the server side of one exchange. Step takes the
// client's next message and returns the answer for it. Once it returns a
// result the client is authenticated; once it returns an error the
// exchange has failed; either ends the session.
type SASLSession interface {
	Step(msg []byte) (answer []byte, res *SASLResult, err error)
}

// SASLConfig is what a broker's SASL mechanisms check against.
type SASLConfig struct {
	// Mechanisms are the enabled mechanisms, a subset of Mechanisms.
	Mechanisms []string
	// Credentials hold the SCRAM credentials that PLAIN and SCRAM check.
	// Required with PLAIN or SCRAM.
	Credentials CredentialStore
	// OAuth validates OAUTHBEARER tokens. Required with OAUTHBEARER.
	OAuth *TokenValidator
}

// SASLServer starts the exchanges of the enabled mechanisms. It is safe
// for concurrent use.
type SASLServer struct {
	cfg SASLConfig
	// fakeKey derives the salt answered for an unknown SCRAM user, so an
	// unknown user gets the same answers as one with a wrong password and
	// cannot be told apart (RFC 5802 section 9, "user enumeration").
	fakeKey []byte
}

// NewSASLServer checks the configuration.
func NewSASLServer(cfg SASLConfig) (*SASLServer, error) {
	if len(cfg.Mechanisms) == 0 {
		return nil, fmt.Errorf("no SASL mechanism enabled: choose from %s", strings.Join(Mechanisms, ","))
	}
	for _, m := range cfg.Mechanisms {
		switch m {
		case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
			if cfg.Credentials == nil {
				return nil, fmt.Errorf("SASL mechanism %s needs a SCRAM credential store", m)
			}
		case MechanismOAuthBearer:
			if cfg.OAuth == nil {
				return nil, fmt.Errorf("SASL mechanism %s needs a token validator (an HMAC key, a JWKS file, or the unsecured test mode)", m)
			}
		default:
			return nil, fmt.Errorf("unknown SASL mechanism %q: choose from %s", m, strings.Join(Mechanisms, ","))
		}
	}
	s := &SASLServer{cfg: cfg, fakeKey: make([]byte, 32)}
	if _, err := rand.Read(s.fakeKey); err != nil {
		return nil, fmt.Errorf("cannot draw a key: %w", err)
	}
	return s, nil
}

// Enabled are the enabled mechanisms, as SaslHandshake lists them.
func (s *SASLServer) Enabled() []string { return slices.Clone(s.cfg.Mechanisms) }

// Start begins an exchange of mechanism; false if it is not enabled.
func (s *SASLServer) Start(mechanism string) (SASLSession, bool) {
	if !slices.Contains(s.cfg.Mechanisms, mechanism) {
		return nil, false
	}
	switch mechanism {
	case MechanismPlain:
		return &plainSession{creds: s.cfg.Credentials}, true
	case MechanismSCRAMSHA256:
		return s.newScramSession(ScramSHA256), true
	case MechanismSCRAMSHA512:
		return s.newScramSession(ScramSHA512), true
	case MechanismOAuthBearer:
		return &oauthSession{v: s.cfg.OAuth}, true
	}
	return nil, false
}

// ParseMechanisms reads a comma-separated list such as
// "PLAIN,SCRAM-SHA-512"; empty entries are skipped, names are upper-cased.
func ParseMechanisms(list []string) ([]string, error) {
	var out []string
	for _, item := range list {
		for name := range strings.SplitSeq(item, ",") {
			name = strings.ToUpper(strings.TrimSpace(name))
			if name == "" || slices.Contains(out, name) {
				continue
			}
			if !slices.Contains(Mechanisms, name) {
				return nil, fmt.Errorf("unknown SASL mechanism %q: choose from %s", name, strings.Join(Mechanisms, ","))
			}
			out = append(out, name)
		}
	}
	return out, nil
}

func badCredentials(mechanism, detail string) *SASLError {
	return &SASLError{
		Reason:  ReasonBadCredentials,
		Message: "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mechanism,
		Detail:  detail,
	}
}

func malformed(mechanism, detail string) *SASLError {
	return &SASLError{Reason: ReasonMalformed, Message: "Authentication failed: malformed " + mechanism + " message", Detail: detail}
}
