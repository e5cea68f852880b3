package broker

// Security inside a cluster (--cluster-tls, --gossip-key-file): the raft
// mux on mutual TLS, the brokers' Kafka client to each other's SSL
// inter-broker listener with the same certificate, gossip encrypted with a
// shared key. The mechanics are in package cluster (tls.go); this file
// resolves the configuration and reloads it with the listeners' TLS files.

import (
	"crypto/tls"
	"errors"

	"github.com/simtel/simtel/broker/cluster"
)

// clusterTLSOn reports whether mutual TLS between brokers is asked for:
// ClusterTLS, or any of ClusterTLSFiles' files.
func (c *Config) clusterTLSOn() bool {
	f := c.ClusterTLSFiles
	return c.ClusterTLS || f.Cert != "" || f.Key != "" || f.CA != "" || len(f.PeerNames) > 0
}

// clusterTLSFiles are ClusterTLSFiles with each empty file taken from TLS
// (--tls-cert, --tls-key, --tls-ca).
func (c *Config) clusterTLSFiles() cluster.TLSFiles {
	f := c.ClusterTLSFiles
	if f.Cert == "" && f.Key == "" {
		f.Cert, f.Key = c.TLS.Cert, c.TLS.Key
	}
	if f.CA == "" {
		f.CA = c.TLS.CA
	}
	return f
}

// validateClusterSecurity: both need cluster mode; the files are loaded
// at start (startCluster), where a bad one stops the broker.
func (c *Config) validateClusterSecurity() error {
	if !c.clustered() && (c.clusterTLSOn() || c.GossipKeyFile != "") {
		return errors.New("--cluster-tls, --cluster-tls-* and --gossip-key-file need --raft-listen (cluster mode)")
	}
	return nil
}

// clusterSecurity loads the cluster's TLS files and gossip keys for
// cluster.Config (nil, nil when they are off).
func (b *Broker) clusterSecurity() (*cluster.TLS, [][]byte, error) {
	var t *cluster.TLS
	var keys [][]byte
	var err error
	if b.cfg.clusterTLSOn() {
		if t, err = cluster.NewTLS(b.cfg.clusterTLSFiles()); err != nil {
			return nil, nil, err
		}
		if l := b.interBrokerListener(); !l.UsesTLS() {
			b.log.Warn("cluster TLS is on but the inter-broker listener is not SSL: the brokers' Kafka traffic to each other stays in clear", "inter_broker_listener", l.Name, "protocol", l.Proto)
		}
	}
	if b.cfg.GossipKeyFile != "" {
		if keys, err = cluster.ReadGossipKeys(b.cfg.GossipKeyFile); err != nil {
			return nil, nil, err
		}
	}
	return t, keys, nil
}

// interBrokerListener is the listener the other brokers dial.
func (b *Broker) interBrokerListener() ListenerSpec {
	for _, l := range b.cfg.Listeners {
		if l.Name == b.cfg.InterBrokerListener {
			return l
		}
	}
	return ListenerSpec{Name: b.cfg.InterBrokerListener, Proto: ProtoPlaintext}
}

// peerTLS is the TLS configuration of this broker's Kafka client to the
// other brokers' inter-broker listener: the cluster certificate when that
// listener is SSL and cluster TLS is on, else nil (plaintext). All brokers
// of a cluster are expected to name the same protocol for it.
func (b *Broker) peerTLS() *tls.Config {
	if b.cluster == nil || b.cluster.TLS() == nil || !b.interBrokerListener().UsesTLS() {
		return nil
	}
	return b.cluster.TLS().ClientConfig()
}

// reloadClusterSecurity reads the cluster's TLS files and gossip key file
// again (with ReloadTLS, on SIGHUP). The gossip keys of the file replace
// the keyring's: see docs/security-cluster.md on rotating them.
func (b *Broker) reloadClusterSecurity() error {
	if b.cluster == nil {
		return nil
	}
	var err error
	if t := b.cluster.TLS(); t != nil {
		err = t.Reload()
	}
	if b.cfg.GossipKeyFile != "" {
		keys, kerr := cluster.ReadGossipKeys(b.cfg.GossipKeyFile)
		if kerr == nil {
			kerr = b.cluster.SetGossipKeys(keys)
		}
		err = errors.Join(err, kerr)
	}
	return err
}
