package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TokenConfig says which OAUTHBEARER tokens (JWTs) a broker accepts.
type TokenConfig struct {
	// HMACKey verifies HS256 tokens (a shared secret, as Slurm's auth/jwt
	// uses). Empty: HS256 is refused.
	HMACKey []byte
	// JWKS is a JSON Web Key Set whose RSA keys verify RS256 tokens and
	// whose P-256 keys verify ES256 tokens. Empty: both are refused.
	JWKS []byte
	// Audience, when set, must be among the token's aud.
	Audience string
	// Issuer, when set, must be the token's iss.
	Issuer string
	// PrincipalClaim names the claim holding the user name. Default "sub".
	PrincipalClaim string
	// Unsecured accepts unsigned tokens (alg "none"), for tests only:
	// anyone can then claim to be anyone.
	Unsecured bool
	// Now is the clock for exp and nbf. Default time.Now.
	Now func() time.Time
}

// TokenValidator checks OAUTHBEARER tokens. It is safe for concurrent use.
type TokenValidator struct {
	cfg     TokenConfig
	methods []string
	rsaKeys map[string]*rsa.PublicKey   // by kid
	ecKeys  map[string]*ecdsa.PublicKey // by kid
}

// NewTokenValidator checks the configuration and parses the key set.
func NewTokenValidator(cfg TokenConfig) (*TokenValidator, error) {
	if cfg.PrincipalClaim == "" {
		cfg.PrincipalClaim = "sub"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	v := &TokenValidator{cfg: cfg}
	if len(cfg.HMACKey) > 0 {
		v.methods = append(v.methods, jwt.SigningMethodHS256.Alg())
	}
	if len(cfg.JWKS) > 0 {
		var err error
		if v.rsaKeys, v.ecKeys, err = ParseJWKS(cfg.JWKS); err != nil {
			return nil, err
		}
		if len(v.rsaKeys) > 0 {
			v.methods = append(v.methods, jwt.SigningMethodRS256.Alg())
		}
		if len(v.ecKeys) > 0 {
			v.methods = append(v.methods, jwt.SigningMethodES256.Alg())
		}
	}
	if cfg.Unsecured {
		v.methods = append(v.methods, jwt.SigningMethodNone.Alg())
	}
	if len(v.methods) == 0 {
		return nil, errors.New("OAUTHBEARER needs an HMAC key file, a JWKS file with an RSA or P-256 key, or the unsecured test mode")
	}
	return v, nil
}

// Validate checks a token's signature, exp (required), nbf, aud and iss,
// and returns its principal and expiry.
func (v *TokenValidator) Validate(token string) (SASLResult, error) {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.methods),
		jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(v.cfg.Now),
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.NewParser(opts...).ParseWithClaims(token, claims, v.key); err != nil {
		return SASLResult{}, err
	}
	name, _ := claims[v.cfg.PrincipalClaim].(string)
	if name == "" {
		return SASLResult{}, fmt.Errorf("token has no string claim %q to name its principal", v.cfg.PrincipalClaim)
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return SASLResult{}, errors.New("token has no exp")
	}
	return SASLResult{Principal: User(name), Expires: exp.Time}, nil
}

// key finds the key that verifies t. WithValidMethods has already
// refused an algorithm that is not configured.
func (v *TokenValidator) key(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	switch t.Method.Alg() {
	case jwt.SigningMethodNone.Alg():
		return jwt.UnsafeAllowNoneSignatureType, nil
	case jwt.SigningMethodHS256.Alg():
		return v.cfg.HMACKey, nil
	case jwt.SigningMethodRS256.Alg():
		return pickKey(v.rsaKeys, kid)
	case jwt.SigningMethodES256.Alg():
		return pickKey(v.ecKeys, kid)
	}
	return nil, fmt.Errorf("algorithm %s is not accepted", t.Method.Alg())
}

// pickKey returns the key named kid, or the only key when the token names
// none.
func pickKey[K any](keys map[string]K, kid string) (K, error) {
	var zero K
	if k, ok := keys[kid]; ok {
		return k, nil
	}
	if kid == "" && len(keys) == 1 {
		for _, k := range keys {
			return k, nil
		}
	}
	return zero, fmt.Errorf("no key with kid %q in the key set", kid)
}

// ParseJWKS reads the RSA and P-256 public keys of a JSON Web Key Set
// (RFC 7517), by kid. Keys of other types or curves, and keys whose "use"
// is not "sig", are skipped; a set with no usable key is an error.
func ParseJWKS(data []byte) (map[string]*rsa.PublicKey, map[string]*ecdsa.PublicKey, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			Crv string `json:"crv"`
			N   string `json:"n"`
			E   string `json:"e"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, nil, fmt.Errorf("cannot parse the JWKS: %w", err)
	}
	rsaKeys := map[string]*rsa.PublicKey{}
	ecKeys := map[string]*ecdsa.PublicKey{}
	b64 := base64.RawURLEncoding
	for i, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		switch k.Kty {
		case "RSA":
			n, err1 := b64.DecodeString(k.N)
			e, err2 := b64.DecodeString(k.E)
			if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
				return nil, nil, fmt.Errorf("JWKS key %d (kid %q): bad RSA modulus or exponent", i, k.Kid)
			}
			pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
			if pub.N.BitLen() < 2048 || pub.E < 3 {
				return nil, nil, fmt.Errorf("JWKS key %d (kid %q): RSA key is too weak (need 2048 bits or more)", i, k.Kid)
			}
			rsaKeys[k.Kid] = pub
		case "EC":
			if k.Crv != "P-256" {
				continue
			}
			x, err1 := b64.DecodeString(k.X)
			y, err2 := b64.DecodeString(k.Y)
			if err := errors.Join(err1, err2); err != nil || len(x) != 32 || len(y) != 32 {
				return nil, nil, fmt.Errorf("JWKS key %d (kid %q): bad P-256 coordinates", i, k.Kid)
			}
			pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
			if err != nil {
				return nil, nil, fmt.Errorf("JWKS key %d (kid %q): %w", i, k.Kid, err)
			}
			ecKeys[k.Kid] = pub
		}
	}
	if len(rsaKeys)+len(ecKeys) == 0 {
		return nil, nil, errors.New("the JWKS has no RSA or P-256 signing key")
	}
	return rsaKeys, ecKeys, nil
}
