package main

import (
	"context"
	"strings"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/kafkasec"
)

// clientSecFlags are the security flags of every command that connects to
// a broker as a client, named as Kafka's client settings; like every flag
// they also come from SIMTEL_<FLAG> (SIMTEL_SECURITY_PROTOCOL,
// SIMTEL_SASL_PASSWORD_FILE, ...). The defaults are a PLAINTEXT client.
type clientSecFlags struct{ cfg kafkasec.Config }

func (s *clientSecFlags) register(f *pflag.FlagSet) {
	f.StringVar(&s.cfg.Protocol, "security-protocol", kafkasec.Plaintext, "how to connect to the brokers: "+strings.Join(kafkasec.Protocols, ", "))
	f.StringVar(&s.cfg.Mechanism, "sasl-mechanism", "", "SASL mechanism of SASL_PLAINTEXT and SASL_SSL: "+strings.Join(kafkasec.Mechanisms, ", "))
	f.StringVar(&s.cfg.Username, "sasl-username", "", "user name for PLAIN and SCRAM")
	f.StringVar(&s.cfg.PasswordFile, "sasl-password-file", "", "file holding the password for PLAIN and SCRAM (re-read at every login)")
	f.StringVar(&s.cfg.TokenFile, "sasl-token-file", "", "file holding the OAUTHBEARER token (a JWT), re-read at every login so a renewed token is used")
	f.StringVar(&s.cfg.CA, "tls-ca", "", "PEM CA certificates the brokers' certificates must chain to, for SSL and SASL_SSL (default: the system's)")
	f.StringVar(&s.cfg.Cert, "tls-cert", "", "PEM client certificate for SSL and SASL_SSL, for brokers that ask for one")
	f.StringVar(&s.cfg.Key, "tls-key", "", "PEM private key of --tls-cert")
}

// opts are the franz-go options of the flags: none for PLAINTEXT.
func (s *clientSecFlags) opts() ([]kgo.Opt, error) { return s.cfg.Opts() }

// dial is opts for a long-running command (agent, sink, scheduler, a
// learner): unless the connection is PLAINTEXT, it first logs in to
// brokers once so that a wrong password or certificate stops the command
// with its error instead of a client that retries forever.
func (s *clientSecFlags) dial(ctx context.Context, brokers []string) ([]kgo.Opt, error) {
	opts, err := s.cfg.Opts()
	if err != nil || len(opts) == 0 {
		return opts, err
	}
	return opts, kafkasec.CheckLogin(ctx, brokers, opts)
}
