package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
	"strings"
)

// The server side of SCRAM (RFC 5802, RFC 7677 for SHA-256; SHA-512 as
// Kafka uses it), two round trips:
//
//	client-first  n,[a=authzid],n=user,r=cnonce[,ext]
//	server-first  r=cnonce+snonce,s=base64(salt),i=iterations
//	client-final  c=base64(gs2-header),r=cnonce+snonce[,ext],p=base64(proof)
//	server-final  v=base64(ServerSignature)
//
// Channel binding is not offered: the gs2 flag must be "n" (the client
// does not support it) or "y" (it does, the server did not offer it), and
// the client-final's c= must repeat the gs2 header exactly.
type scramSession struct {
	mech ScramMechanism
	srv  *SASLServer
	step int

	gs2Header   string
	user        string
	cnonce      string // the client's nonce
	nonce       string // the client's and the server's
	firstBare   string
	serverFirst string
	cred        ScramCredential
	known       bool
}

func (s *SASLServer) newScramSession(m ScramMechanism) *scramSession {
	return &scramSession{mech: m, srv: s}
}

// scramNonceBytes is the server's share of the nonce, base64-encoded.
const scramNonceBytes = 24

func (s *scramSession) Step(msg []byte) ([]byte, *SASLResult, error) {
	s.step++
	switch s.step {
	case 1:
		return s.first(string(msg))
	case 2:
		return s.final(string(msg))
	}
	return nil, nil, &SASLError{Reason: ReasonIllegalState, Message: "Authentication failed: " + s.mech.String() + " exchange is already complete"}
}

func (s *scramSession) first(msg string) ([]byte, *SASLResult, error) {
	cf, err := ParseScramClientFirst(msg)
	if err != nil {
		return nil, nil, malformed(s.mech.String(), err.Error())
	}
	if cf.Authzid != "" && cf.Authzid != cf.User {
		return nil, nil, &SASLError{Reason: ReasonAuthzidNotUsername, Message: "Authentication failed: Client requested an authorization id that is different from username"}
	}
	s.gs2Header, s.user, s.firstBare = cf.GS2Header, cf.User, cf.Bare
	s.cred, s.known = s.srv.cfg.Credentials.ScramCredential(cf.User, s.mech)
	if !s.known {
		// Answer as for a real user with a salt derived from the name,
		// and fail at the proof: an unknown user is not revealed.
		s.cred = ScramCredential{
			Mechanism:  s.mech,
			Iterations: MinScramIterations,
			Salt:       hmacSum(s.mech.hash(), s.srv.fakeKey, []byte(cf.User))[:scramSaltBytes],
		}
	}
	snonce := make([]byte, scramNonceBytes)
	if _, err := rand.Read(snonce); err != nil {
		return nil, nil, &SASLError{Reason: ReasonIllegalState, Message: "Authentication failed: server error", Detail: err.Error()}
	}
	s.cnonce = cf.Nonce
	s.nonce = cf.Nonce + base64.StdEncoding.EncodeToString(snonce)
	s.serverFirst = "r=" + s.nonce + ",s=" + base64.StdEncoding.EncodeToString(s.cred.Salt) + ",i=" + strconv.Itoa(int(s.cred.Iterations))
	return []byte(s.serverFirst), nil, nil
}

func (s *scramSession) final(msg string) ([]byte, *SASLResult, error) {
	cf, err := ParseScramClientFinal(msg)
	if err != nil {
		return nil, nil, malformed(s.mech.String(), err.Error())
	}
	if cf.ChannelBinding != s.gs2Header {
		return nil, nil, malformed(s.mech.String(), "channel binding does not repeat the gs2 header")
	}
	// librdkafka repeats its own nonce before the server's (which starts
	// with it again); Kafka accepts that, so must we. Either way the
	// whole server nonce comes back, which is what makes the proof fresh.
	if cf.Nonce != s.nonce && cf.Nonce != s.cnonce+s.nonce {
		return nil, nil, malformed(s.mech.String(), "nonce does not match the server's")
	}
	h := s.mech.hash()
	if len(cf.Proof) != h().Size() {
		return nil, nil, malformed(s.mech.String(), "proof has the wrong length")
	}
	if !s.known {
		return nil, nil, badCredentials(s.mech.String(), "unknown user "+s.user)
	}
	authMsg := []byte(s.firstBare + "," + s.serverFirst + "," + cf.WithoutProof)
	clientKey := hmacSum(h, s.cred.StoredKey, authMsg)
	subtle.XORBytes(clientKey, clientKey, cf.Proof)
	stored := h()
	stored.Write(clientKey)
	if !hmac.Equal(stored.Sum(nil), s.cred.StoredKey) {
		return nil, nil, badCredentials(s.mech.String(), "wrong proof for user "+s.user)
	}
	v := "v=" + base64.StdEncoding.EncodeToString(hmacSum(h, s.cred.ServerKey, authMsg))
	return []byte(v), &SASLResult{Principal: User(s.user)}, nil
}

// ScramClientFirst is a parsed client-first message.
type ScramClientFirst struct {
	GS2Header string // "n,," or "y,a=bob," as sent
	Authzid   string
	User      string // saslname decoded
	Nonce     string
	Bare      string // the message without the gs2 header
}

type scramParseError string

func (e scramParseError) Error() string { return string(e) }

// ParseScramClientFirst parses a client-first message (RFC 5802 section 7).
func ParseScramClientFirst(msg string) (ScramClientFirst, error) {
	var cf ScramClientFirst
	flag, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return cf, scramParseError("no gs2 header")
	}
	switch {
	case flag == "n" || flag == "y":
	case strings.HasPrefix(flag, "p="):
		return cf, scramParseError("channel binding is not supported")
	default:
		return cf, scramParseError("bad gs2 channel binding flag")
	}
	authz, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return cf, scramParseError("gs2 header is not terminated")
	}
	if authz != "" {
		v, ok := strings.CutPrefix(authz, "a=")
		if !ok {
			return cf, scramParseError("bad authzid")
		}
		name, err := decodeSaslname(v)
		if err != nil {
			return cf, err
		}
		cf.Authzid = name
	}
	cf.GS2Header = msg[:len(msg)-len(bare)]
	cf.Bare = bare
	fields := strings.Split(bare, ",")
	if len(fields) < 2 {
		return cf, scramParseError("want n=user,r=nonce")
	}
	if strings.HasPrefix(fields[0], "m=") {
		return cf, scramParseError("mandatory extensions are not supported")
	}
	user, ok := strings.CutPrefix(fields[0], "n=")
	if !ok {
		return cf, scramParseError("no user name")
	}
	name, err := decodeSaslname(user)
	if err != nil {
		return cf, err
	}
	if name == "" {
		return cf, scramParseError("empty user name")
	}
	cf.User = name
	nonce, ok := strings.CutPrefix(fields[1], "r=")
	if !ok || !printableNonce(nonce) {
		return cf, scramParseError("bad client nonce")
	}
	cf.Nonce = nonce
	return cf, nil
}

// ScramClientFinal is a parsed client-final message.
type ScramClientFinal struct {
	ChannelBinding string // decoded c=, the gs2 header for "n" and "y"
	Nonce          string
	Proof          []byte
	WithoutProof   string
}

// ParseScramClientFinal parses a client-final message (RFC 5802 section 7).
func ParseScramClientFinal(msg string) (ScramClientFinal, error) {
	var cf ScramClientFinal
	i := strings.LastIndex(msg, ",")
	if i < 0 {
		return cf, scramParseError("no proof")
	}
	cf.WithoutProof = msg[:i]
	proof, ok := strings.CutPrefix(msg[i+1:], "p=")
	if !ok {
		return cf, scramParseError("proof is not the last attribute")
	}
	var err error
	if cf.Proof, err = base64.StdEncoding.DecodeString(proof); err != nil {
		return cf, scramParseError("proof is not base64")
	}
	fields := strings.Split(cf.WithoutProof, ",")
	if len(fields) < 2 {
		return cf, scramParseError("want c=binding,r=nonce,p=proof")
	}
	cb, ok := strings.CutPrefix(fields[0], "c=")
	if !ok {
		return cf, scramParseError("no channel binding")
	}
	bind, err := base64.StdEncoding.DecodeString(cb)
	if err != nil {
		return cf, scramParseError("channel binding is not base64")
	}
	cf.ChannelBinding = string(bind)
	if cf.Nonce, ok = strings.CutPrefix(fields[1], "r="); !ok {
		return cf, scramParseError("no nonce")
	}
	return cf, nil
}

// decodeSaslname undoes RFC 5802's escaping of ',' (=2C) and '=' (=3D);
// any other '=' is an error.
func decodeSaslname(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", scramParseError("bad escape in name")
		}
		i += 2
	}
	return b.String(), nil
}

// printableNonce: RFC 5802's printable, ASCII 0x21-0x7E except ','.
func printableNonce(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == ',' {
			return false
		}
	}
	return true
}
