package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/simtel/simtel/broker"
	"github.com/simtel/simtel/broker/server"
	"github.com/simtel/simtel/internal/tlsfiles"
)

// listenerFlags are the broker's listener and TLS flags.
type listenerFlags struct {
	listeners, advertised string
	clientAuth            string
}

func (lf *listenerFlags) register(f *pflag.FlagSet, cfg *broker.Config) {
	f.StringVar(&lf.listeners, "listeners", "", "named Kafka listeners, name=PROTOCOL://host:port,... with PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (instead of --listen), e.g. internal=SSL://0.0.0.0:9093,local=PLAINTEXT://127.0.0.1:9092")
	f.StringVar(&lf.advertised, "advertised-listeners", "", "addresses given to the clients of each listener, name=PROTOCOL://host:port,... (default: each listener's own address)")
	f.StringVar(&cfg.InterBrokerListener, "inter-broker-listener", "", "name of the listener the other brokers dial (default: the first PLAINTEXT listener, else the first)")
	f.StringVar(&cfg.TLS.Cert, "tls-cert", "", "PEM certificate (chain) of the SSL and SASL_SSL listeners; reloaded when it changes and on SIGHUP")
	f.StringVar(&cfg.TLS.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.StringVar(&cfg.TLS.CA, "tls-ca", "", "PEM CA certificates that client certificates must chain to (default: the system's)")
	f.StringVar(&lf.clientAuth, "tls-client-auth", "none", "client certificates on SSL listeners: none, requested (verified if sent) or required")
	f.DurationVar(&cfg.TLSReloadInterval, "tls-reload-interval", 10*time.Second, "how often the TLS files are checked for a change (SIGHUP reloads them at once)")
	f.StringVar(&cfg.TLSPrincipalMapping, "tls-principal-mapping", "", "rules naming a client certificate's principal, as Kafka's ssl.principal.mapping.rules (RULE:pattern/replacement/[LU],...,DEFAULT); default: User:<subject CN>")
}

// apply parses the flags into cfg. --listen keeps its default unless
// --listeners is given.
func (lf *listenerFlags) apply(cmd *cobra.Command, cfg *broker.Config) error {
	var err error
	if cfg.TLS.ClientAuth, err = tlsfiles.ParseClientAuth(lf.clientAuth); err != nil {
		return err
	}
	if lf.listeners != "" {
		if !cmd.Flags().Changed("listen") {
			cfg.Listen = ""
		}
		if cfg.Listeners, err = server.ParseListeners(lf.listeners); err != nil {
			return err
		}
	}
	if lf.advertised != "" {
		if cfg.AdvertisedListeners, err = server.ParseListeners(lf.advertised); err != nil {
			return err
		}
	}
	return nil
}

// reloadOnHangup calls reload on SIGHUP until stop is called or ctx ends:
// the broker's TLS files, the agent's TLS and token files.
func reloadOnHangup(ctx context.Context, reload func() error, log *slog.Logger) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				if err := reload(); err != nil {
					log.Warn("cannot reload the files on SIGHUP; the previous ones stay in use", "err", err)
				} else {
					log.Info("files reloaded on SIGHUP")
				}
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}
