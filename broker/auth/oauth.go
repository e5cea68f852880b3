package auth

import (
	"strings"
)

// OAUTHBEARER (RFC 7628). The client's one message carries the token:
//
//	n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A...]^A
//
// A valid token ends the exchange. A refused one is answered, as the RFC
// asks, with a JSON error as a challenge, {"status":"invalid_token"}; the
// client acknowledges it with a lone ^A, and only then does the exchange
// fail, with the same JSON as Kafka's error message.
type oauthSession struct {
	v       *TokenValidator
	step    int
	refused *SASLError
}

// oauthInvalidToken is RFC 7628's error status for a refused token.
const oauthInvalidToken = `{"status":"invalid_token"}`

func (s *oauthSession) Step(msg []byte) ([]byte, *SASLResult, error) {
	s.step++
	switch {
	case s.step == 1:
		authzid, token, err := ParseOAuthBearer(string(msg))
		if err != nil {
			return nil, nil, err
		}
		res, verr := s.v.Validate(token)
		if verr == nil && authzid != "" && User(authzid) != res.Principal {
			return nil, nil, &SASLError{Reason: ReasonAuthzidNotUsername, Message: "Authentication failed: Client requested an authorization id that is different from the token's principal"}
		}
		if verr != nil {
			s.refused = &SASLError{Reason: ReasonBadToken, Message: oauthInvalidToken, Detail: verr.Error()}
			return []byte(oauthInvalidToken), nil, nil
		}
		return nil, &res, nil
	case s.step == 2 && s.refused != nil:
		if string(msg) != "\x01" {
			return nil, nil, malformed(MechanismOAuthBearer, "the answer to an error challenge must be a single %x01")
		}
		return nil, nil, s.refused
	}
	return nil, nil, &SASLError{Reason: ReasonIllegalState, Message: "Authentication failed: OAUTHBEARER exchange is already complete"}
}

// ParseOAuthBearer reads a client's initial OAUTHBEARER message and returns
// its authorization id (empty if none) and bearer token.
func ParseOAuthBearer(msg string) (authzid, token string, err error) {
	bad := func(detail string) (string, string, error) {
		return "", "", malformed(MechanismOAuthBearer, detail)
	}
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok || (flag != "n" && flag != "y") {
		return bad("bad gs2 header")
	}
	authz, rest, ok := strings.Cut(rest, ",")
	if !ok {
		return bad("gs2 header is not terminated")
	}
	if authz != "" {
		v, ok := strings.CutPrefix(authz, "a=")
		if !ok {
			return bad("bad authzid")
		}
		if authzid, err = decodeSaslname(v); err != nil {
			return bad(err.Error())
		}
	}
	body, ok := strings.CutPrefix(rest, "\x01")
	if !ok {
		return bad("no key/value pairs")
	}
	body, ok = strings.CutSuffix(body, "\x01\x01")
	if !ok {
		return bad("key/value pairs are not terminated")
	}
	for kv := range strings.SplitSeq(body, "\x01") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || !isAlpha(k) || !oauthValue(v) {
			return bad("bad key/value pair")
		}
		if k != "auth" {
			continue // extensions: none is understood, none is required
		}
		scheme, tok, ok := strings.Cut(v, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
			return bad("auth is not a bearer token")
		}
		if token != "" {
			return bad("two auth values")
		}
		token = tok
	}
	if token == "" {
		return bad("no auth value")
	}
	return authzid, token, nil
}

func isAlpha(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// oauthValue: RFC 7628's value, *(VCHAR / SP / HTAB / CR / LF).
func oauthValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 0x21 || c > 0x7e) && c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
