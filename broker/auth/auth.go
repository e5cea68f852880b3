// Package auth holds what the broker knows about who a client is and what
// it may do: principals, SCRAM credentials and the interfaces through which
// listeners, SASL mechanisms and the authorizer meet. It imports nothing of
// the broker, so every part of the broker (and its tests) may use it.
package auth

import "fmt"

// Principal names a client as Kafka does: "User:alice". A connection that
// has not authenticated (a PLAINTEXT listener, or SSL without a client
// certificate) is Anonymous.
type Principal string

// Anonymous is the principal of an unauthenticated connection.
const Anonymous Principal = "User:ANONYMOUS"

// User returns the principal of a user name.
func User(name string) Principal { return Principal("User:" + name) }

// ScramMechanism is a SCRAM hash as Kafka's DescribeUserScramCredentials
// and AlterUserScramCredentials number it.
type ScramMechanism int8

// The SCRAM mechanisms Kafka defines.
const (
	ScramSHA256 ScramMechanism = 1
	ScramSHA512 ScramMechanism = 2
)

// String is the SASL mechanism name.
func (m ScramMechanism) String() string {
	switch m {
	case ScramSHA256:
		return "SCRAM-SHA-256"
	case ScramSHA512:
		return "SCRAM-SHA-512"
	}
	return fmt.Sprintf("SCRAM(%d)", int8(m))
}

// ScramCredential is what the broker keeps of a SCRAM user (RFC 5802):
// never the password, only the salt, the iteration count and the keys
// derived from them.
type ScramCredential struct {
	Mechanism  ScramMechanism
	Iterations int32
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
}

// CredentialStore looks up SCRAM credentials. The cluster's replicated
// state implements it on every broker; tests may use a map.
type CredentialStore interface {
	ScramCredential(user string, m ScramMechanism) (ScramCredential, bool)
}
