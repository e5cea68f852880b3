package agent

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/agent/gossip"
	"github.com/simtel/simtel/learner"
)

// The agent's policy side: one subscriber per policy keeps the node's copy
// of the newest version in PolicyDir (tmpfs by default, so local workers
// read it from memory), and the HTTP API serves it to workers and accepts
// new versions from learners:
//
//	GET  /v1/policy/<name>                    current version (404 until one is held)
//	GET  /v1/policy/<name>?after=V&wait=30s   long poll: answers as soon as a version > V is held, 304 at the deadline
//	POST /v1/policy/<name>                    body = the weights; published as a new version
//	GET  /v1/rollout/<name>                   which node of the gossip pool holds which version
//
// Each node advertises the versions it holds through the gossip pool, so
// any agent can say how far a rollout has got.

type policyState struct {
	subs  map[string]*learner.Subscriber
	pool  *gossip.Pool
	relay *relay // nil: no peer relay

	pubOnce   sync.Once
	pubClient *kgo.Client
	publisher *learner.Publisher // one per agent: POSTs for one policy take turns
	pubErr    error
}

// PolicyInfo is what the agent's HTTP API answers for a held version
// (GET /v1/policy/<name>, POST /v1/policy/<name>).
type PolicyInfo struct {
	Policy    string            `json:"policy"`
	Version   int64             `json:"version"`
	Path      string            `json:"path"`
	Size      int64             `json:"size"`
	SHA256    string            `json:"sha256"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Published time.Time         `json:"published"`
}

func infoOf(m learner.Manifest, path string) PolicyInfo {
	return PolicyInfo{Policy: m.Policy, Version: m.Version, Path: path, Size: m.Size, SHA256: m.SHA256, Metadata: m.Metadata, Published: m.Published}
}

// startPolicies opens the subscribers and the gossip pool; their
// goroutines run under ctx and are waited for by wg.
func (a *Agent) startPolicies(ctx context.Context, wg *sync.WaitGroup) error {
	ps := &policyState{subs: map[string]*learner.Subscriber{}}
	a.policies = ps
	var relayL net.Listener
	var relayAddr string
	if a.cfg.PolicyRelayListen != "" {
		key, err := readRelayKey(a.cfg.PolicyRelayKey)
		if err != nil {
			return err
		}
		if relayL, err = net.Listen("tcp", a.cfg.PolicyRelayListen); err != nil {
			return fmt.Errorf("cannot listen for the policy relay: %w", err)
		}
		relayAddr = relayL.Addr().String()
		if host, port, _ := net.SplitHostPort(relayAddr); net.ParseIP(host).IsUnspecified() {
			relayAddr = ":" + port // peers use the host of the gossip address
		}
		ps.relay = newRelay(&a.cfg, key, a.log.With("part", "relay"))
	}
	if a.cfg.GossipListen != "" {
		cluster := a.cfg.Tags.Run
		if cluster == "" {
			cluster = "default"
		}
		pool, err := gossip.Start(gossip.Config{
			NodeName: a.cfg.Tags.Host,
			Bind:     a.cfg.GossipListen,
			Join:     a.cfg.GossipJoin,
			Cluster:  cluster,
			Relay:    relayAddr,
			Logger:   a.log.With("part", "gossip"),
			Fast:     a.cfg.GossipFast,
		})
		if err != nil {
			if relayL != nil {
				relayL.Close()
			}
			return fmt.Errorf("cannot start gossip on %s: %w", a.cfg.GossipListen, err)
		}
		ps.pool = pool
	}
	if ps.relay != nil {
		ps.relay.pool = ps.pool
		ps.relay.serve(relayL)
		a.log.Info("policy relay serving", "listen", relayL.Addr().String(), "advertised", relayAddr,
			"seeds", a.cfg.PolicyRelaySeeds, "wait", a.cfg.PolicyRelayWait)
	}
	var keys []ed25519.PublicKey
	if a.cfg.PolicyTrustedKeys != "" {
		b, err := os.ReadFile(a.cfg.PolicyTrustedKeys)
		if err != nil {
			return fmt.Errorf("cannot read the policy trusted keys: %w", err)
		}
		if keys, err = learner.ParseTrustedKeys(b); err != nil {
			return fmt.Errorf("policy trusted keys %s: %w", a.cfg.PolicyTrustedKeys, err)
		}
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = learner.KeyID(k)
		}
		a.log.Info("policy versions must be signed", "keys", ids)
	}
	for _, name := range a.cfg.Policies {
		sc := learner.SubscriberConfig{
			Brokers:     a.cfg.Brokers,
			ClientOpts:  a.cfg.ClientOpts,
			Policy:      name,
			Dir:         a.cfg.PolicyDir,
			Keep:        a.cfg.PolicyKeep,
			TrustedKeys: keys,
			Logger:      a.log.With("part", "policy", "policy", name),
		}
		if ps.relay != nil {
			sc.Peers, sc.OnChunk = ps.relay, ps.relay.onChunk
		}
		sub, err := learner.NewSubscriber(sc)
		if err != nil {
			return fmt.Errorf("cannot subscribe to policy %q: %w", name, err)
		}
		ps.subs[name] = sub
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := sub.Run(ctx); err != nil && ctx.Err() == nil {
				a.log.Error("policy subscriber stopped", "policy", name, "err", err)
			}
		}()
		go func() {
			defer wg.Done()
			a.followPolicy(ctx, name, sub)
		}()
	}
	return nil
}

// followPolicy advertises each newly held version in the gossip pool.
func (a *Agent) followPolicy(ctx context.Context, name string, sub *learner.Subscriber) {
	var held int64 = -1
	for {
		m, _, err := sub.Wait(ctx, held)
		if err != nil {
			return
		}
		held = m.Version
		a.log.Info("policy version held", "policy", name, "version", m.Version, "bytes", m.Size)
		if p := a.policies.pool; p != nil {
			p.SetHolding(name, gossip.Holding{Version: m.Version, Since: time.Now()})
		}
		if r := a.policies.relay; r != nil {
			r.dropPartial(name, m.Version) // served from the cache from now on
		}
	}
}

func (a *Agent) stopPolicies() {
	if a.policies == nil {
		return
	}
	if a.policies.relay != nil {
		a.policies.relay.close()
	}
	if a.policies.pool != nil {
		_ = a.policies.pool.Close()
	}
	if a.policies.pubClient != nil {
		a.policies.pubClient.Close()
	}
}

func (a *Agent) publisher() (*learner.Publisher, error) {
	ps := a.policies
	ps.pubOnce.Do(func() {
		ps.pubClient, ps.pubErr = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...)}, a.cfg.ClientOpts...)...)
		if ps.pubErr == nil {
			ps.publisher = learner.NewPublisher(ps.pubClient, a.log.With("part", "publisher"))
		}
	})
	return ps.publisher, ps.pubErr
}

func (a *Agent) handlePolicy(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/policy/")
	if err := learner.CheckPolicyName(name); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		a.getPolicy(w, r, name)
	case http.MethodPost, http.MethodPut:
		a.postPolicy(w, r, name)
	default:
		w.Header().Set("Allow", "GET, POST")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use GET to read a policy and POST to publish one"})
	}
}

func (a *Agent) getPolicy(w http.ResponseWriter, r *http.Request, name string) {
	sub := a.policies.subs[name]
	if sub == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("this agent does not follow policy %q; start it with --policies %s", name, name)})
		return
	}
	q := r.URL.Query()
	if q.Has("after") || q.Has("wait") {
		after, err := strconv.ParseInt(q.Get("after"), 10, 64)
		if q.Get("after") == "" {
			after, err = 0, nil
		}
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "after must be a version number"})
			return
		}
		wait := 30 * time.Second
		if q.Get("wait") != "" {
			if wait, err = time.ParseDuration(q.Get("wait")); err != nil || wait < 0 || wait > 10*time.Minute {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "wait must be a duration up to 10m, like 30s"})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		m, path, err := sub.Wait(ctx, after)
		if err != nil {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		writeJSON(w, http.StatusOK, infoOf(m, path))
		return
	}
	m, path, ok := sub.Current()
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("no version of policy %q has arrived yet; long-poll with ?after=0&wait=30s", name)})
		return
	}
	writeJSON(w, http.StatusOK, infoOf(m, path))
}

func (a *Agent) postPolicy(w http.ResponseWriter, r *http.Request, name string) {
	pub, err := a.publisher()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "cannot reach the brokers: " + err.Error()})
		return
	}
	meta := map[string]string{}
	for k, vs := range r.URL.Query() {
		if len(vs) > 0 {
			meta[k] = vs[0]
		}
	}
	m, err := pub.Publish(r.Context(), name, r.Body, meta, nil)
	if err != nil {
		code := http.StatusBadGateway
		if errors.Is(err, context.Canceled) {
			code = http.StatusBadRequest
		}
		writeJSON(w, code, map[string]string{"error": "cannot publish policy " + name + ": " + err.Error()})
		return
	}
	writeJSON(w, http.StatusCreated, m)
}

func (a *Agent) handleRollout(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/v1/rollout/")
	if a.policies.pool == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "gossip is off on this agent; start it with --gossip-listen"})
		return
	}
	writeJSON(w, http.StatusOK, a.policies.pool.View(name))
}

// policyCollector exports, per policy, the held version and how stale it
// is: against the newest manifest this node has seen on the topic and
// against the newest version held anywhere in the gossip pool.
type policyCollector struct{ a *Agent }

var (
	descPolicyVersion  = prometheus.NewDesc("simtel_agent_policy_version", "Version of the policy this node holds (0: none yet).", []string{"policy"}, nil)
	descPolicyStaleV   = prometheus.NewDesc("simtel_agent_policy_stale_versions", "Versions between the newest published and the one held.", []string{"policy"}, nil)
	descPolicyStaleS   = prometheus.NewDesc("simtel_agent_policy_stale_seconds", "Seconds since a newer version than the one held was published (0: up to date).", []string{"policy"}, nil)
	descPolicyCorrupt  = prometheus.NewDesc("simtel_agent_policy_corrupt_total", "Versions rejected: hash mismatch or missing chunks.", []string{"policy"}, nil)
	descPolicyFetched  = prometheus.NewDesc("simtel_agent_policy_fetched_total", "Versions fetched and installed.", []string{"policy"}, nil)
	descPolicyUntrust  = prometheus.NewDesc("simtel_agent_policy_untrusted_total", "Versions refused: not signed by a key of --policy-trusted-keys.", []string{"policy"}, nil)
	descPolicyRecv     = prometheus.NewDesc("simtel_agent_policy_received_bytes_total", "Policy record bytes received from the brokers.", []string{"policy"}, nil)
	descPolicyReused   = prometheus.NewDesc("simtel_agent_policy_reused_bytes_total", "Chunk bytes of new versions taken from versions already on this node (deltas).", []string{"policy"}, nil)
	descPolicyPoolNode = prometheus.NewDesc("simtel_agent_policy_pool_nodes", "Nodes of the gossip pool by the version they hold.", []string{"policy", "version"}, nil)

	descPeerBytes    = prometheus.NewDesc("simtel_agent_policy_peer_bytes_total", "Chunk bytes of new versions received from peers of the pool (relay); received_bytes_total counts those from the brokers.", []string{"policy"}, nil)
	descPeerChunks   = prometheus.NewDesc("simtel_agent_policy_peer_chunks_total", "Chunks of new versions received from peers of the pool.", []string{"policy"}, nil)
	descPeerCorrupt  = prometheus.NewDesc("simtel_agent_policy_peer_corrupt_chunks_total", "Chunks from peers that did not match the signed manifest (the peer is avoided for a minute).", []string{"policy"}, nil)
	descPeerErrors   = prometheus.NewDesc("simtel_agent_policy_peer_errors_total", "Chunk requests to peers that failed: refused, not found, gone or timed out.", []string{"policy"}, nil)
	descRelayChunks  = prometheus.NewDesc("simtel_agent_policy_relay_served_chunks_total", "Chunks this node's relay served to peers.", []string{"policy"}, nil)
	descRelayBytes   = prometheus.NewDesc("simtel_agent_policy_relay_served_bytes_total", "Chunk bytes this node's relay served to peers.", []string{"policy"}, nil)
	descRelayRefused = prometheus.NewDesc("simtel_agent_policy_relay_refused_total", "Relay requests refused: not signed with the pool's key.", nil, nil)
)

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPolicyVersion, descPolicyStaleV, descPolicyStaleS, descPolicyCorrupt, descPolicyFetched, descPolicyPoolNode, descPolicyUntrust, descPolicyRecv, descPolicyReused,
		descPeerBytes, descPeerChunks, descPeerCorrupt, descPeerErrors, descRelayChunks, descRelayBytes, descRelayRefused} {
		ch <- d
	}
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	ps := c.a.policies
	if ps == nil {
		return
	}
	for name, sub := range ps.subs {
		var held int64
		if m, _, ok := sub.Current(); ok {
			held = m.Version
		}
		st := sub.Stats()
		newest := max(st.LatestSeen, held)
		var staleSec float64
		if ps.pool != nil {
			v := ps.pool.View(name)
			newest = max(newest, v.Newest)
			for ver, n := range v.ByVersion {
				ch <- prometheus.MustNewConstMetric(descPolicyPoolNode, prometheus.GaugeValue, float64(n), name, strconv.FormatInt(ver, 10))
			}
		}
		if newest > held && !st.LatestSeenAt.IsZero() {
			staleSec = time.Since(st.LatestSeenAt).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(descPolicyVersion, prometheus.GaugeValue, float64(held), name)
		ch <- prometheus.MustNewConstMetric(descPolicyStaleV, prometheus.GaugeValue, float64(newest-held), name)
		ch <- prometheus.MustNewConstMetric(descPolicyStaleS, prometheus.GaugeValue, staleSec, name)
		ch <- prometheus.MustNewConstMetric(descPolicyCorrupt, prometheus.CounterValue, float64(st.Corrupt), name)
		ch <- prometheus.MustNewConstMetric(descPolicyFetched, prometheus.CounterValue, float64(st.Fetched), name)
		ch <- prometheus.MustNewConstMetric(descPolicyUntrust, prometheus.CounterValue, float64(st.Untrusted), name)
		ch <- prometheus.MustNewConstMetric(descPolicyRecv, prometheus.CounterValue, float64(st.Received), name)
		ch <- prometheus.MustNewConstMetric(descPolicyReused, prometheus.CounterValue, float64(st.Reused), name)
		if ps.relay != nil {
			rs := ps.relay.stats[name]
			ch <- prometheus.MustNewConstMetric(descPeerBytes, prometheus.CounterValue, float64(rs.peerBytes.Load()), name)
			ch <- prometheus.MustNewConstMetric(descPeerChunks, prometheus.CounterValue, float64(rs.peerChunks.Load()), name)
			ch <- prometheus.MustNewConstMetric(descPeerCorrupt, prometheus.CounterValue, float64(rs.peerCorrupt.Load()), name)
			ch <- prometheus.MustNewConstMetric(descPeerErrors, prometheus.CounterValue, float64(rs.peerErrors.Load()), name)
			ch <- prometheus.MustNewConstMetric(descRelayChunks, prometheus.CounterValue, float64(rs.servedChunks.Load()), name)
			ch <- prometheus.MustNewConstMetric(descRelayBytes, prometheus.CounterValue, float64(rs.servedBytes.Load()), name)
		}
	}
	if ps.relay != nil {
		ch <- prometheus.MustNewConstMetric(descRelayRefused, prometheus.CounterValue, float64(ps.relay.refused.Load()))
	}
}
