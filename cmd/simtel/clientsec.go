package main

import (
	"context"
	"fmt"
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

// names are the flags of the group.
var clientSecNames = []string{"security-protocol", "sasl-mechanism", "sasl-username", "sasl-password-file",
	"sasl-token-file", "tls-ca", "tls-cert", "tls-key"}

// fromVars sets each flag of the group that the command line and the
// environment left unset from SIMTEL_<FLAG> in vars (a Slurm hook's
// --env-file: Slurm gives its hooks neither arguments nor this
// environment).
func (s *clientSecFlags) fromVars(f *pflag.FlagSet, vars map[string]string) error {
	for _, name := range clientSecNames {
		fl := f.Lookup(name)
		key := "SIMTEL_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if v, ok := vars[key]; ok && fl != nil && !fl.Changed {
			if err := fl.Value.Set(v); err != nil {
				return fmt.Errorf("%s=%q is not valid for --%s: %w", key, v, name, err)
			}
		}
	}
	return nil
}

// opts are the franz-go options of the flags: none for PLAINTEXT.
func (s *clientSecFlags) opts() ([]kgo.Opt, error) { return s.cfg.Opts() }

// kafkaFlags are --brokers and the client security flags of a command
// that connects to the brokers as a Kafka client.
type kafkaFlags struct {
	brokers string
	sec     clientSecFlags
}

// register adds the flags to f, --brokers with the default addresses def
// and the help text usage.
func (k *kafkaFlags) register(f *pflag.FlagSet, def, usage string) {
	f.StringVar(&k.brokers, "brokers", def, usage)
	k.sec.register(f)
}

// client is the broker addresses and the client options (TLS, SASL).
func (k *kafkaFlags) client() ([]string, []kgo.Opt, error) {
	opts, err := k.sec.opts()
	return splitList(k.brokers), opts, err
}

// dial is client for a long-running command: the options have passed the
// login check of clientSecFlags.dial.
func (k *kafkaFlags) dial(ctx context.Context) ([]string, []kgo.Opt, error) {
	brokers := splitList(k.brokers)
	opts, err := k.sec.dial(ctx, brokers)
	return brokers, opts, err
}

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
