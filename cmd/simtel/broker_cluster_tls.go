package main

import (
	"github.com/spf13/pflag"

	"github.com/simtel/simtel/broker"
)

// registerClusterTLSFlags adds the flags of security inside a cluster:
// mutual TLS between the brokers and the gossip key.
func registerClusterTLSFlags(f *pflag.FlagSet, cfg *broker.Config) {
	f.BoolVar(&cfg.ClusterTLS, "cluster-tls", false, "cluster mode: raft traffic and the brokers' Kafka client to each other's SSL inter-broker listener over mutual TLS; each --cluster-tls-* file defaults to its --tls-* one (any --cluster-tls-* turns it on)")
	f.StringVar(&cfg.ClusterTLSFiles.Cert, "cluster-tls-cert", "", "PEM certificate (chain) this broker shows the other brokers (default: --tls-cert); reloaded on SIGHUP")
	f.StringVar(&cfg.ClusterTLSFiles.Key, "cluster-tls-key", "", "PEM private key of --cluster-tls-cert (default: --tls-key)")
	f.StringVar(&cfg.ClusterTLSFiles.CA, "cluster-tls-ca", "", "PEM CA certificates a broker's certificate must chain to (default: --tls-ca; required one way or the other)")
	f.StringSliceVar(&cfg.ClusterTLSFiles.PeerNames, "cluster-tls-peer-names", nil, "only brokers whose certificate has one of these subject CNs or DNS names are peers, comma-separated (default: any certificate of the CA); needed when the CA also signs clients' certificates")
	f.StringVar(&cfg.GossipKeyFile, "gossip-key-file", "", "cluster mode: file of base64 gossip keys (16, 24 or 32 bytes), one a line, the first encrypting, all accepted; gossip is encrypted and authenticated with them; reread on SIGHUP (key rotation)")
}
