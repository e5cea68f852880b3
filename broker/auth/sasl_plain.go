package auth

import (
	"bytes"
	"unicode/utf8"
)

// PLAIN (RFC 4616): one message, [authzid] NUL authcid NUL password,
// checked against the user's SCRAM credential: the password is salted and
// iterated as the credential was, and the derived key compared. There is
// no separate store of PLAIN passwords.
type plainSession struct {
	creds CredentialStore
	done  bool
}

// plainMechanisms are the credentials PLAIN tries, strongest first.
var plainMechanisms = []ScramMechanism{ScramSHA512, ScramSHA256}

// dummyCredential is checked when the user has no credential, so an
// unknown user costs the same derivation as a wrong password.
var dummyCredential = ScramCredentialFromSalted(ScramSHA512, make([]byte, scramSaltBytes), make([]byte, 64), MinScramIterations)

func (s *plainSession) Step(msg []byte) ([]byte, *SASLResult, error) {
	if s.done {
		return nil, nil, &SASLError{Reason: ReasonIllegalState, Message: "Authentication failed: PLAIN takes one message"}
	}
	s.done = true
	authzid, user, password, err := ParsePlain(msg)
	if err != nil {
		return nil, nil, err
	}
	if authzid != "" && authzid != user {
		return nil, nil, &SASLError{Reason: ReasonAuthzidNotUsername, Message: "Authentication failed: Client requested an authorization id that is different from username"}
	}
	for _, m := range plainMechanisms {
		if c, ok := s.creds.ScramCredential(user, m); ok {
			if c.VerifyPassword(password) {
				return nil, &SASLResult{Principal: User(user)}, nil
			}
			return nil, nil, badCredentials(MechanismPlain, "wrong password for user "+user)
		}
	}
	dummyCredential.VerifyPassword(password)
	return nil, nil, badCredentials(MechanismPlain, "unknown user "+user)
}

// ParsePlain splits a PLAIN message into its authorization id, user name
// and password. The user name and password must be non-empty UTF-8.
func ParsePlain(msg []byte) (authzid, user, password string, err error) {
	parts := bytes.Split(msg, []byte{0})
	if len(parts) != 3 {
		return "", "", "", malformed(MechanismPlain, "want authzid NUL user NUL password")
	}
	if len(parts[1]) == 0 || len(parts[2]) == 0 {
		return "", "", "", malformed(MechanismPlain, "empty user name or password")
	}
	for _, p := range parts {
		if !utf8.Valid(p) {
			return "", "", "", malformed(MechanismPlain, "not UTF-8")
		}
	}
	return string(parts[0]), string(parts[1]), string(parts[2]), nil
}
