package pgwire

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Users are the accounts of a users file. Each line is
//
//	name:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>
//
// the verifier format of PostgreSQL's pg_authid.rolpassword (salt and keys
// in base64), so a verifier made by PostgreSQL works as is; HashPassword
// (simtel lake serve --pg-hash-password) makes one. Blank lines and lines
// starting with # are ignored. The file holds no passwords.
type Users struct {
	path string
	mu   sync.RWMutex
	m    map[string]verifier
	fake []byte // salts of unknown users derive from it
}

type verifier struct {
	iterations int
	salt       []byte
	storedKey  []byte
	serverKey  []byte
}

// scramIterations is the iteration count of new verifiers, PostgreSQL's
// default (scram_iterations).
const scramIterations = 4096

// LoadUsers reads a users file.
func LoadUsers(path string) (*Users, error) {
	u := &Users{path: path, fake: make([]byte, 32)}
	rand.Read(u.fake)
	if err := u.Reload(); err != nil {
		return nil, err
	}
	return u, nil
}

// Reload reads the file again; on an error the accounts stay as they were.
func (u *Users) Reload() error {
	data, err := os.ReadFile(u.path)
	if err != nil {
		return fmt.Errorf("cannot read the users file: %w", err)
	}
	m, err := parseUsers(data)
	if err != nil {
		return fmt.Errorf("users file %s: %w", u.path, err)
	}
	u.mu.Lock()
	u.m = m
	u.mu.Unlock()
	return nil
}

// Len is how many accounts there are.
func (u *Users) Len() int {
	u.mu.RLock()
	defer u.mu.RUnlock()
	return len(u.m)
}

func parseUsers(data []byte) (map[string]verifier, error) {
	m := map[string]verifier{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		name, ver, ok := strings.Cut(s, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("line %d: want name:SCRAM-SHA-256$…", line)
		}
		v, err := parseVerifier(ver)
		if err != nil {
			return nil, fmt.Errorf("line %d (%s): %w", line, name, err)
		}
		m[name] = v
	}
	return m, sc.Err()
}

func parseVerifier(s string) (verifier, error) {
	rest, ok := strings.CutPrefix(s, "SCRAM-SHA-256$")
	if !ok {
		return verifier{}, errors.New("the verifier does not start with SCRAM-SHA-256$")
	}
	params, keys, ok := strings.Cut(rest, "$")
	iter, salt, ok1 := strings.Cut(params, ":")
	stored, server, ok2 := strings.Cut(keys, ":")
	if !ok || !ok1 || !ok2 {
		return verifier{}, errors.New("want SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>")
	}
	var v verifier
	var err error
	if v.iterations, err = strconv.Atoi(iter); err != nil || v.iterations < 1 || v.iterations > 1<<24 {
		return v, fmt.Errorf("iterations %q", iter)
	}
	dec := base64.StdEncoding.DecodeString
	if v.salt, err = dec(salt); err != nil {
		return v, fmt.Errorf("salt: %w", err)
	}
	if v.storedKey, err = dec(stored); err != nil || len(v.storedKey) != sha256.Size {
		return v, errors.New("StoredKey is not 32 bytes of base64")
	}
	if v.serverKey, err = dec(server); err != nil || len(v.serverKey) != sha256.Size {
		return v, errors.New("ServerKey is not 32 bytes of base64")
	}
	return v, nil
}

// HashPassword makes the SCRAM-SHA-256 verifier of a password for a users
// file line.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	v, err := deriveVerifier(password, salt, scramIterations)
	if err != nil {
		return "", err
	}
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", v.iterations, enc(v.salt), enc(v.storedKey), enc(v.serverKey)), nil
}

func deriveVerifier(password string, salt []byte, iterations int) (verifier, error) {
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return verifier{}, err
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	return verifier{iterations: iterations, salt: salt, storedKey: stored[:], serverKey: mac(salted, "Server Key")}, nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// lookup returns the user's verifier; for an unknown user a made-up one,
// so the exchange looks the same and fails only at the proof.
func (u *Users) lookup(name string) (verifier, bool) {
	u.mu.RLock()
	v, ok := u.m[name]
	u.mu.RUnlock()
	if ok {
		return v, true
	}
	return verifier{iterations: scramIterations, salt: mac(u.fake, name)[:16], storedKey: make([]byte, 32), serverKey: make([]byte, 32)}, false
}

var errAuth = errors.New("password authentication failed")

// scram runs SCRAM-SHA-256 (RFC 5802, RFC 7677) as PostgreSQL does: the
// user is the startup packet's, the SCRAM user name is ignored, and channel
// binding is not offered.
func (c *conn) scram(users *Users) error {
	c.be.Send(&pgproto3.AuthenticationSASL{AuthMechanisms: []string{"SCRAM-SHA-256"}})
	if err := c.be.Flush(); err != nil {
		return err
	}
	if err := c.be.SetAuthType(pgproto3.AuthTypeSASL); err != nil {
		return err
	}
	msg, err := c.be.Receive()
	if err != nil {
		return err
	}
	init, ok := msg.(*pgproto3.SASLInitialResponse)
	if !ok || init.AuthMechanism != "SCRAM-SHA-256" {
		return errors.New("the client did not start SCRAM-SHA-256")
	}
	first := string(init.Data)
	// gs2 header: "n,," or "y,," (no channel binding); then the bare part.
	if !strings.HasPrefix(first, "n,") && !strings.HasPrefix(first, "y,") {
		return errors.New("SCRAM channel binding is not supported")
	}
	rest := first[2:]
	i := strings.IndexByte(rest, ',')
	if i < 0 {
		return errors.New("malformed SCRAM client-first message")
	}
	gs2 := first[:2+i+1]
	bare := rest[i+1:]
	var cnonce string
	for _, a := range strings.Split(bare, ",") {
		if v, ok := strings.CutPrefix(a, "r="); ok {
			cnonce = v
		}
	}
	if cnonce == "" {
		return errors.New("SCRAM client-first message without a nonce")
	}
	v, known := users.lookup(c.user)
	sn := make([]byte, 18)
	rand.Read(sn)
	nonce := cnonce + base64.StdEncoding.EncodeToString(sn)
	serverFirst := fmt.Sprintf("r=%s,s=%s,i=%d", nonce, base64.StdEncoding.EncodeToString(v.salt), v.iterations)
	c.be.Send(&pgproto3.AuthenticationSASLContinue{Data: []byte(serverFirst)})
	if err := c.be.Flush(); err != nil {
		return err
	}
	if err := c.be.SetAuthType(pgproto3.AuthTypeSASLContinue); err != nil {
		return err
	}
	msg, err = c.be.Receive()
	if err != nil {
		return err
	}
	resp, ok := msg.(*pgproto3.SASLResponse)
	if !ok {
		return errors.New("the client did not continue SCRAM")
	}
	final := string(resp.Data)
	j := strings.LastIndex(final, ",p=")
	if j < 0 {
		return errors.New("SCRAM client-final message without a proof")
	}
	withoutProof := final[:j]
	proof, err := base64.StdEncoding.DecodeString(final[j+3:])
	if err != nil || len(proof) != sha256.Size {
		return errAuth
	}
	var gotNonce, cb string
	for _, a := range strings.Split(withoutProof, ",") {
		if x, ok := strings.CutPrefix(a, "r="); ok {
			gotNonce = x
		}
		if x, ok := strings.CutPrefix(a, "c="); ok {
			cb = x
		}
	}
	if gotNonce != nonce || cb != base64.StdEncoding.EncodeToString([]byte(gs2)) {
		return errAuth
	}
	authMsg := bare + "," + serverFirst + "," + withoutProof
	sig := mac(v.storedKey, authMsg)
	clientKey := make([]byte, len(sig))
	for k := range sig {
		clientKey[k] = proof[k] ^ sig[k]
	}
	h := sha256.Sum256(clientKey)
	if !known || subtle.ConstantTimeCompare(h[:], v.storedKey) != 1 {
		return errAuth
	}
	c.be.Send(&pgproto3.AuthenticationSASLFinal{Data: []byte("v=" + base64.StdEncoding.EncodeToString(mac(v.serverKey, authMsg)))})
	return nil
}
