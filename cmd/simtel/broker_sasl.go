package main

import (
	"github.com/spf13/pflag"

	"github.com/simtel/simtel/broker"
)

// registerSASLFlags adds the flags of the SASL listeners (broker.SASLConfig).
func registerSASLFlags(f *pflag.FlagSet, c *broker.SASLConfig) {
	f.StringSliceVar(&c.Mechanisms, "sasl-mechanisms", nil, "SASL mechanisms of the SASL_PLAINTEXT and SASL_SSL listeners, comma-separated: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (PLAIN and SCRAM check the SCRAM credentials of simtel user add)")
	f.DurationVar(&c.SessionLifetime, "sasl-session-lifetime", 0, "how long a SASL authentication holds before the client must re-authenticate on its connection (connections.max.reauth.ms; 0: until the connection closes, or an OAUTHBEARER token's expiry)")
	f.StringVar(&c.OAuthHMACKeyFile, "sasl-oauthbearer-hmac-key-file", "", "OAUTHBEARER: file with the shared key verifying HS256 tokens (e.g. Slurm's jwt_hs256.key, 32 bytes or more)")
	f.StringVar(&c.OAuthJWKSFile, "sasl-oauthbearer-jwks-file", "", "OAUTHBEARER: JSON Web Key Set file whose RSA and P-256 keys verify RS256 and ES256 tokens")
	f.StringVar(&c.OAuthAudience, "sasl-oauthbearer-audience", "", "OAUTHBEARER: audience a token's aud must contain (empty: not checked)")
	f.StringVar(&c.OAuthIssuer, "sasl-oauthbearer-issuer", "", "OAUTHBEARER: issuer a token's iss must be (empty: not checked)")
	f.StringVar(&c.OAuthPrincipalClaim, "sasl-oauthbearer-principal-claim", "sub", "OAUTHBEARER: the token claim naming the user")
	f.BoolVar(&c.OAuthUnsecured, "sasl-oauthbearer-unsecured", false, "OAUTHBEARER: accept unsigned tokens (alg none) - anyone can claim any user; for tests only")
}
