package auth

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"fmt"
	"hash"
)

// The iteration counts Kafka accepts for a SCRAM credential
// (AlterUserScramCredentials answers UNACCEPTABLE_CREDENTIAL outside).
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
)

// scramSaltBytes is the length of the salt NewScramCredential draws.
const scramSaltBytes = 32

// hash is the mechanism's hash function, nil for an unknown mechanism.
func (m ScramMechanism) hash() func() hash.Hash {
	switch m {
	case ScramSHA256:
		return sha256.New
	case ScramSHA512:
		return sha512.New
	}
	return nil
}

// NewScramCredential derives the credential of a password with a fresh
// random salt (RFC 5802 section 3). The password is used as its UTF-8
// bytes, as Kafka does (no SASLprep).
func NewScramCredential(m ScramMechanism, password string, iterations int) (ScramCredential, error) {
	salt := make([]byte, scramSaltBytes)
	if _, err := rand.Read(salt); err != nil {
		return ScramCredential{}, fmt.Errorf("cannot draw a salt: %w", err)
	}
	return scramCredential(m, password, salt, iterations)
}

func scramCredential(m ScramMechanism, password string, salt []byte, iterations int) (ScramCredential, error) {
	h := m.hash()
	if h == nil {
		return ScramCredential{}, fmt.Errorf("unknown SCRAM mechanism %d", int8(m))
	}
	if iterations < MinScramIterations || iterations > MaxScramIterations {
		return ScramCredential{}, fmt.Errorf("%s iterations %d are outside [%d, %d]", m, iterations, MinScramIterations, MaxScramIterations)
	}
	salted, err := pbkdf2.Key(h, password, salt, iterations, h().Size())
	if err != nil {
		return ScramCredential{}, fmt.Errorf("cannot derive the %s salted password: %w", m, err)
	}
	return ScramCredentialFromSalted(m, salt, salted, int32(iterations)), nil
}

// ScramCredentialFromSalted makes the credential of a salted password
// (Hi(password, salt, iterations), what AlterUserScramCredentials carries).
func ScramCredentialFromSalted(m ScramMechanism, salt, saltedPassword []byte, iterations int32) ScramCredential {
	h := m.hash()
	clientKey := hmacSum(h, saltedPassword, []byte("Client Key"))
	stored := h()
	stored.Write(clientKey)
	return ScramCredential{
		Mechanism:  m,
		Iterations: iterations,
		Salt:       append([]byte(nil), salt...),
		StoredKey:  stored.Sum(nil),
		ServerKey:  hmacSum(h, saltedPassword, []byte("Server Key")),
	}
}

// VerifyPassword reports whether password derives the credential's keys.
// The keys are compared in constant time.
func (c ScramCredential) VerifyPassword(password string) bool {
	if c.Mechanism.hash() == nil || c.Iterations < 1 {
		return false
	}
	// scramCredential bounds the iterations; a stored credential was
	// bounded when it was made, so only the derivation is repeated here.
	h := c.Mechanism.hash()
	salted, err := pbkdf2.Key(h, password, c.Salt, int(c.Iterations), h().Size())
	if err != nil {
		return false
	}
	got := ScramCredentialFromSalted(c.Mechanism, c.Salt, salted, c.Iterations)
	return subtle.ConstantTimeCompare(got.StoredKey, c.StoredKey) == 1
}

func hmacSum(h func() hash.Hash, key, data []byte) []byte {
	mac := hmac.New(h, key)
	mac.Write(data)
	return mac.Sum(nil)
}

// CredentialMap is a CredentialStore held in memory, user → one credential
// per mechanism. Tests and a broker without replicated state use it; it is
// not safe for concurrent writes.
type CredentialMap map[string][]ScramCredential

// ScramCredential implements CredentialStore.
func (m CredentialMap) ScramCredential(user string, mech ScramMechanism) (ScramCredential, bool) {
	for _, c := range m[user] {
		if c.Mechanism == mech {
			return c, true
		}
	}
	return ScramCredential{}, false
}

// Add derives and stores user's credential for mech, replacing an older
// one of the same mechanism.
func (m CredentialMap) Add(user, password string, mech ScramMechanism, iterations int) error {
	c, err := NewScramCredential(mech, password, iterations)
	if err != nil {
		return err
	}
	cs := m[user][:0:0]
	for _, old := range m[user] {
		if old.Mechanism != mech {
			cs = append(cs, old)
		}
	}
	m[user] = append(cs, c)
	return nil
}
