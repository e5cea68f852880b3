package broker

// Cluster mode (--raft-listen): the controller (package cluster) holds the
// topics, their configs and which broker leads each partition. This file
// connects it to the single-node broker:
//
//   - followClusterMetadata mirrors the controller metadata into b.mu.topics:
//     every topic is there with its full partition count, but only the
//     partitions this broker has a replica of have a *partition.Partition; the
//     others are nil. Requests for partitions this broker does not lead
//     (nil, or a raft follower replica, see package partition) get
//     NOT_LEADER_OR_FOLLOWER.
//   - topic creation, deletion and partition growth run on the controller
//     leader only; other brokers answer NOT_CONTROLLER so clients re-route
//     (clients send these to the controller named in Metadata). Config
//     changes and auto-creation in Metadata are forwarded to the leader
//     from any broker, because clients send those to any broker.
//   - __consumer_offsets is a replicated topic too; the coordinator of a
//     group is the raft leader of the group's partition of it (see
//     coordinators.go).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/partition"
)

func (b *Broker) startCluster() error {
	clusterTLS, gossipKeys, err := b.clusterSecurity()
	if err != nil {
		return fmt.Errorf("cannot start cluster mode: %w", err)
	}
	n, err := cluster.New(cluster.Config{
		NodeID:          b.cfg.NodeID,
		DataDir:         b.cfg.DataDir,
		KafkaAddr:       b.interBrokerAddr(),
		Listeners:       b.advertisedListeners(),
		RaftListen:      b.cfg.RaftListen,
		RaftAdvertise:   b.cfg.RaftAdvertise,
		GossipListen:    b.cfg.GossipListen,
		Join:            b.cfg.Join,
		BootstrapExpect: b.cfg.BootstrapExpect,
		TLS:             clusterTLS,
		GossipKeys:      gossipKeys,
		Logger:          b.log.With("part", "cluster"),
		Registerer:      b.metrics.reg,
	})
	if err != nil {
		return fmt.Errorf("cannot start cluster mode: %w", err)
	}
	b.cluster = n
	b.sec.Attach(n)
	return nil
}

// followClusterMetadata applies every metadata change to the local
// partitions until ctx ends. A periodic pass retries partitions that
// could not be opened before.
func (b *Broker) followClusterMetadata(ctx context.Context) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	collected := false
	for {
		b.syncClusterTopics()
		if !collected {
			collected = b.collectStalePartitions(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-b.cluster.Changes():
		case <-t.C:
		}
	}
}

func (b *Broker) syncClusterTopics() {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	b.syncClusterTopicsLocked()
}

// syncClusterTopicsLocked makes b.mu.topics match the controller's
// metadata; the caller holds adminMu. Partitions assigned here are opened
// (their data kept if the directory belongs to the same topic id), those
// no longer assigned here are closed, topics deleted from the metadata
// have their files removed.
func (b *Broker) syncClusterTopicsLocked() {
	md := b.cluster.Metadata()
	self := b.cfg.NodeID
	for name, ti := range md.Topics {
		old := b.topic(name)
		if old != nil && old.id != ti.ID {
			b.dropClusterTopic(old)
			old = nil
		}
		configs := maps.Clone(ti.Configs)
		if configs == nil {
			configs = map[string]string{}
		}
		configsChanged := old != nil && !maps.Equal(old.configs, configs)
		nt := &topic{name: name, id: ti.ID, configs: configs, parts: make([]*partition.Partition, len(ti.Partitions))}
		changed := old == nil || configsChanged || len(old.parts) != len(nt.parts)
		opened := b.openClusterPartitions(nt, old, ti.Partitions)
		for i, a := range ti.Partitions {
			var have *partition.Partition
			if old != nil && i < len(old.parts) {
				have = old.parts[i]
			}
			if !slices.Contains(a.Members(), self) {
				if have != nil {
					// Reassigned away: the raft group no longer has this
					// replica (the reassignment finished only after its
					// removal), so its files go.
					if err := have.Remove(); err != nil {
						b.log.Warn("cannot remove a partition moved away", "topic", name, "partition", i, "err", err)
					}
					_ = os.Remove(b.partitionIDFile(name, int32(i)))
					b.log.Info("replica moved away; its files are removed", "topic", name, "partition", i, "replicas", a.Replicas)
					changed = true
				}
				continue
			}
			if have == nil {
				o := opened[i]
				if o.err != nil {
					b.log.Error("cannot open an assigned partition; retrying later", "topic", name, "partition", i, "err", o.err)
					continue
				}
				if o.p == nil {
					continue
				}
				have, changed = o.p, true
			} else if configsChanged {
				have.Log().UpdateConfig(b.storageConfig(b.partitionDir(name, int32(i)), configs))
				have.SetSettings(b.partitionSettings(configs))
			}
			nt.parts[i] = have
		}
		if changed {
			b.mu.Lock()
			b.mu.topics[name] = nt
			b.mu.Unlock()
			if old == nil {
				b.log.Info("topic opened from the controller", "topic", name, "partitions", len(nt.parts))
			}
		}
	}
	for _, t := range b.allTopics() {
		if md.Topics[t.name] == nil {
			b.dropClusterTopic(t)
			b.deleteTopicOffsets(t.name)
			b.log.Info("topic deleted by the controller", "topic", t.name)
		}
	}
}

// openWorkers is how many partitions of a topic a broker opens at once.
// Opening one is mostly waiting (its files, fsyncs, the raft group's WAL
// records), and one after the other a broker took minutes to open
// thousands, while the replicas that had opened theirs waited for it.
// Sixteen opened 10,000 in 55 s where eight took 65-89 s
// (bench/docs/replication.md, "3,000 and 10,000 partitions").
const openWorkers = 16

type openedPartition struct {
	p   *partition.Partition
	err error
}

// openClusterPartitions opens, openWorkers at a time, the partitions of
// nt assigned to this broker that old (nil for a topic not open here)
// does not have; by index, the others left empty.
func (b *Broker) openClusterPartitions(nt, old *topic, as []cluster.Assignment) []openedPartition {
	out := make([]openedPartition, len(as))
	var todo []int
	for i, a := range as {
		if !slices.Contains(a.Members(), b.cfg.NodeID) || old != nil && i < len(old.parts) && old.parts[i] != nil {
			continue
		}
		todo = append(todo, i)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(openWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				p, err := b.openClusterPartition(nt, int32(i), as[i])
				out[i] = openedPartition{p: p, err: err}
			}
		}()
	}
	for _, i := range todo {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// collectStalePartitions removes partition directories of topics deleted
// (or re-created under a new id) while this broker was down. It runs once,
// after the local metadata has caught up with the leader's; until then it
// reports false and is retried, since an empty metadata right after start
// must not be taken for "every topic was deleted".
func (b *Broker) collectStalePartitions(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := b.cluster.CatchUp(cctx)
	cancel()
	if err != nil {
		return false
	}
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	md := b.cluster.Metadata()
	dataDir := filepath.Join(b.cfg.DataDir, "data")
	entries, err := os.ReadDir(dataDir)
	if err != nil {
		b.log.Warn("cannot list partition directories", "dir", dataDir, "err", err)
		return true
	}
	for _, e := range entries {
		marker, ok := strings.CutSuffix(e.Name(), ".topic-id")
		if !ok || e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(marker, '-')
		if i <= 0 {
			continue
		}
		name := marker[:i]
		id, _ := os.ReadFile(filepath.Join(dataDir, e.Name()))
		if t := md.Topics[name]; t != nil && hex.EncodeToString(t.ID[:]) == string(id) {
			part, err := strconv.Atoi(marker[i+1:])
			if err != nil || part >= len(t.Partitions) || slices.Contains(t.Partitions[part].Members(), b.cfg.NodeID) {
				continue
			}
			// Still a topic, but this replica was moved away while the
			// broker was down: drop it like a deleted one.
		}
		if err := os.RemoveAll(filepath.Join(dataDir, marker)); err != nil {
			b.log.Warn("cannot remove a stale partition directory", "dir", marker, "err", err)
			continue
		}
		_ = os.Remove(filepath.Join(dataDir, e.Name()))
		var tid [16]byte
		part, perr := strconv.ParseInt(marker[i+1:], 10, 32)
		if n, herr := hex.Decode(tid[:], id); herr == nil && n == len(tid) && perr == nil {
			if err := b.cluster.DropGroupLog(cluster.PartitionGroupID(tid, int32(part))); err != nil {
				b.log.Warn("cannot drop a stale partition's raft log from the wal; its space stays in use", "partition", marker, "err", err)
			}
		}
		b.log.Info("removed the partition of a topic deleted while this broker was down", "partition", marker)
	}
	return true
}

// dropClusterTopic removes a topic's local partitions and files.
func (b *Broker) dropClusterTopic(t *topic) {
	b.mu.Lock()
	if b.mu.topics[t.name] == t {
		delete(b.mu.topics, t.name)
	}
	b.mu.Unlock()
	// All at once: stopping a raft group waits for its RPCs in flight,
	// and a peer holds those of a group it has not opened yet for up to
	// its mux's hold time (a topic deleted right after its creation). One
	// after the other, a topic with many partitions kept the broker's
	// admin lock, and so every topic creation and deletion here, for
	// minutes.
	var wg sync.WaitGroup
	for _, p := range t.parts {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Remove(); err != nil {
				b.log.Warn("cannot remove a deleted partition's files", "topic", t.name, "partition", p.Index(), "err", err)
			}
			_ = os.Remove(b.partitionIDFile(t.name, p.Index()))
		}()
	}
	wg.Wait()
}

// partitionIDFile records which topic id a partition directory belongs to,
// so a topic deleted and re-created under the same name while this broker
// was down does not inherit the old records.
func (b *Broker) partitionIDFile(t string, p int32) string {
	return b.partitionDir(t, p) + ".topic-id"
}

func (b *Broker) openClusterPartition(t *topic, i int32, a cluster.Assignment) (*partition.Partition, error) {
	idFile := b.partitionIDFile(t.name, i)
	want := hex.EncodeToString(t.id[:])
	if got, err := os.ReadFile(idFile); err != nil || string(got) != want {
		if err := os.RemoveAll(b.partitionDir(t.name, i)); err != nil {
			return nil, fmt.Errorf("cannot clear stale partition directory: %w", err)
		}
		if err := writeFileAtomic(idFile, []byte(want)); err != nil {
			return nil, err
		}
	}
	p, err := b.openPartition(t, i)
	if err != nil || len(a.Members()) < 2 {
		return p, err
	}
	// Every replica of a group that never changed members bootstraps it
	// with the same configuration (all of them as voters), so the group
	// can elect a leader even if one replica dies before it ever ran (a
	// single bootstrapping replica that died first left the others with
	// no configuration and the partition without a leader for good). A
	// replica added by a reassignment never bootstraps: it waits for the
	// leader to contact it.
	bootstrap := !a.Moved && slices.Contains(a.Replicas, b.cfg.NodeID)
	if err := b.startReplica(p, t.id, a.Replicas, bootstrap); err != nil {
		_ = p.Close()
		return nil, fmt.Errorf("cannot start the raft group of %s-%d: %w", t.name, i, err)
	}
	return p, nil
}

// absentPartitionCode is the error for a partition this broker has no log
// for: NOT_LEADER_OR_FOLLOWER when the cluster has it elsewhere (the client
// refreshes its metadata and goes to the leader), else unknown.
func (b *Broker) absentPartitionCode(t string, p int32) int16 {
	if b.cluster != nil {
		if ti := b.cluster.Metadata().Topics[t]; ti != nil && p >= 0 && int(p) < len(ti.Partitions) {
			return kerr.NotLeaderForPartition.Code
		}
	}
	return kerr.UnknownTopicOrPartition.Code
}

// createdReplicationFactor is the replication factor a CreateTopics answer
// reports: the placed topic's, or (validate only) the request's resolved
// against the alive brokers. Always 1 on a single node.
func (b *Broker) createdReplicationFactor(name string, requested int16) int16 {
	if b.cluster == nil {
		return 1
	}
	md := b.cluster.Metadata()
	if ti := md.Topics[name]; ti != nil && len(ti.Partitions) > 0 {
		return int16(len(ti.Partitions[0].Replicas))
	}
	if requested > 0 {
		return requested
	}
	return int16(max(1, min(cluster.DefaultReplicationFactor, len(md.AliveBrokers()))))
}

func (b *Broker) clusterCreateTopic(name string, partitions int32, rf int16, configs map[string]*string, validateOnly bool) (*topic, error) {
	if !b.cluster.IsLeader() {
		return nil, admin.NotController()
	}
	partitions, err := b.newTopicPartitions(partitions)
	if err != nil {
		return nil, err
	}
	if alive := len(b.cluster.Metadata().AliveBrokers()); rf == 0 || rf < -1 || int(rf) > alive {
		return nil, fmt.Errorf("%w: replication factor %d: must be between 1 and the %d alive brokers, or -1 for the default (%d, at most the alive brokers)",
			kerr.InvalidReplicationFactor, rf, alive, cluster.DefaultReplicationFactor)
	}
	overrides, err := topicOverrides(configs)
	if err != nil {
		return nil, err
	}
	if b.cluster.Metadata().Topics[name] != nil {
		return nil, fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, name)
	}
	if validateOnly {
		return &topic{name: name, configs: overrides, parts: make([]*partition.Partition, partitions)}, nil
	}
	cmd := cluster.Command{Op: cluster.OpCreateTopic, Topic: name, Partitions: partitions, Configs: overrides, ReplicationFactor: rf}
	_, _ = rand.Read(cmd.TopicID[:])
	ctx, cancel := context.WithTimeout(context.Background(), admin.Timeout)
	defer cancel()
	if _, err := b.cluster.Apply(ctx, cmd); err != nil {
		return nil, admin.ControllerError(err)
	}
	b.syncClusterTopics()
	b.log.Info("topic created", "topic", name, "partitions", partitions)
	if t := b.topic(name); t != nil {
		return t, nil
	}
	return &topic{name: name, id: cmd.TopicID, configs: overrides, parts: make([]*partition.Partition, partitions)}, nil
}

func (b *Broker) clusterDeleteTopic(name string) error {
	if !b.cluster.IsLeader() {
		return admin.NotController()
	}
	ctx, cancel := context.WithTimeout(context.Background(), admin.Timeout)
	defer cancel()
	if _, err := b.cluster.Apply(ctx, cluster.Command{Op: cluster.OpDeleteTopic, Topic: name}); err != nil {
		return admin.ControllerError(err)
	}
	b.syncClusterTopics()
	b.log.Info("topic deleted", "topic", name)
	return nil
}

func (b *Broker) clusterCreatePartitions(name string, count int32, validateOnly bool) error {
	if !b.cluster.IsLeader() {
		return admin.NotController()
	}
	if name == offsetsTopic {
		return fmt.Errorf("%w: %s is an internal topic", kerr.InvalidRequest, name)
	}
	t := b.cluster.Metadata().Topics[name]
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	if err := checkPartitionIncrease(name, len(t.Partitions), count); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), admin.Timeout)
	defer cancel()
	if _, err := b.cluster.Apply(ctx, cluster.Command{Op: cluster.OpCreatePartitions, Topic: name, Partitions: count}); err != nil {
		return admin.ControllerError(err)
	}
	b.syncClusterTopics()
	b.log.Info("partitions added", "topic", name, "partitions", count)
	return nil
}

// clusterSetTopicConfigs replaces a topic's overrides through the
// controller; the caller (setTopicConfigs) holds adminMu. Unlike topic
// creation it is forwarded from any broker: clients send AlterConfigs and
// IncrementalAlterConfigs for topics to any broker (franz-go shards them
// to a random one and does not retry on NOT_CONTROLLER), as Kafka brokers
// forward them to their controller. The new overrides are computed from
// this broker's copy of the metadata; two alters of one topic racing
// through different brokers can lose one's keys (last writer wins).
func (b *Broker) clusterSetTopicConfigs(name string, next map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), admin.Timeout)
	defer cancel()
	if _, err := b.cluster.Apply(ctx, cluster.Command{Op: cluster.OpSetTopicConfigs, Topic: name, Configs: next}); err != nil {
		return admin.ControllerError(err)
	}
	// Forwarded: wait until the change is applied here too, so that a
	// DescribeConfigs on this broker right after shows it.
	if err := b.cluster.CatchUp(ctx); err != nil {
		b.log.Warn("config change applied on the controller, not yet here", "topic", name, "err", err)
	}
	b.syncClusterTopicsLocked()
	return nil
}

// clusterAutoCreate creates a topic named in Metadata through the
// controller (forwarded if this broker is not the leader) and waits a
// moment for the local metadata to show it.
func (b *Broker) clusterAutoCreate(ctx context.Context, name string) error {
	if err := validTopicName(name); err != nil {
		return fmt.Errorf("%w: %v", kerr.InvalidTopicException, err)
	}
	cmd := cluster.Command{Op: cluster.OpCreateTopic, Topic: name, Partitions: b.cfg.DefaultPartitions}
	_, _ = rand.Read(cmd.TopicID[:])
	ctx, cancel := context.WithTimeout(ctx, admin.Timeout)
	defer cancel()
	res, err := b.cluster.Apply(ctx, cmd)
	if err != nil && !errors.Is(err, cluster.ErrTopicExists) {
		return admin.ControllerError(err)
	}
	if err == nil {
		b.log.Info("topic auto-created", "topic", name, "partitions", cmd.Partitions)
	}
	for b.cluster.Metadata().Index < res.Index {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: topic %q is created but not yet known here", kerr.LeaderNotAvailable, name)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func hasAllTopics(md *cluster.Metadata, req []kmsg.MetadataRequestTopic) bool {
	for _, rt := range req {
		if rt.Topic != nil {
			if md.Topics[*rt.Topic] == nil {
				return false
			}
			continue
		}
		found := false
		for _, t := range md.Topics {
			found = found || t.ID == rt.TopicID
		}
		if !found {
			return false
		}
	}
	return true
}

func splitHostPort(addr string) (string, int32) {
	host, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	return host, int32(n)
}

func (b *Broker) clusterBrokers(md *cluster.Metadata) []cluster.BrokerInfo {
	alive := md.AliveBrokers()
	if len(alive) == 0 {
		// Not registered yet (cluster forming): name ourselves so a
		// client always has a broker to talk to.
		alive = []cluster.BrokerInfo{{ID: b.cfg.NodeID, KafkaAddr: b.interBrokerAddr(), Listeners: b.advertisedListeners(), Alive: true}}
	}
	return alive
}

func (b *Broker) handleClusterMetadata(ctx context.Context, listener string, r *kmsg.MetadataRequest, mayCreate func(string) error) *kmsg.MetadataResponse {
	resp := r.ResponseKind().(*kmsg.MetadataResponse)
	resp.Version = r.Version
	md := b.cluster.Metadata()
	for _, br := range b.clusterBrokers(md) {
		mb := kmsg.NewMetadataResponseBroker()
		mb.NodeID = br.ID
		var ok bool
		if mb.Host, mb.Port, ok = brokerAddr(listener, br); ok {
			resp.Brokers = append(resp.Brokers, mb)
		}
	}
	cid := md.ClusterID
	if cid == "" {
		cid = b.clusterID
	}
	resp.ClusterID = &cid
	resp.ControllerID, _ = b.cluster.LeaderID()
	resp.AuthorizedOperations = -2147483648

	var topics []*cluster.TopicInfo
	var missing []kmsg.MetadataResponseTopic
	if r.Topics == nil || (r.Version == 0 && len(r.Topics) == 0) {
		for _, t := range md.Topics {
			topics = append(topics, t)
		}
		sort.Slice(topics, func(i, j int) bool { return topics[i].Name < topics[j].Name })
	} else {
		if !hasAllTopics(md, r.Topics) {
			// Maybe created a moment ago on the leader and not yet
			// applied here: catch up before answering "unknown".
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := b.cluster.CatchUp(cctx); err != nil {
				b.log.Debug("cannot catch up with the controller", "err", err)
			}
			cancel()
			md = b.cluster.Metadata()
		}
		lookup := func(rt kmsg.MetadataRequestTopic) *cluster.TopicInfo {
			var t *cluster.TopicInfo
			switch {
			case rt.Topic != nil:
				t = md.Topics[*rt.Topic]
			case rt.TopicID != [16]byte{}:
				for _, c := range md.Topics {
					if c.ID == rt.TopicID {
						t = c
					}
				}
			}
			return t
		}
		var create func(string) (*cluster.TopicInfo, error)
		if autoCreate(b.cfg, r) {
			create = func(name string) (*cluster.TopicInfo, error) {
				if name == offsetsTopic {
					return nil, nil
				}
				err := mayCreate(name)
				if err == nil {
					err = b.clusterAutoCreate(ctx, name)
				}
				if err != nil {
					return nil, err
				}
				md = b.cluster.Metadata()
				return md.Topics[name], nil
			}
		}
		topics, missing = requestedTopics(r.Topics, lookup, create)
	}
	b.awaitElections(ctx, topics)
	md = b.cluster.Metadata()
	for _, t := range topics {
		mt := kmsg.NewMetadataResponseTopic()
		name := t.Name
		mt.Topic = &name
		mt.TopicID = t.ID
		mt.IsInternal = name == offsetsTopic
		mt.AuthorizedOperations = -2147483648
		for i, a := range t.Partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition = int32(i)
			mp.Leader = a.Leader
			mp.LeaderEpoch = a.LeaderEpoch
			// A replica here knows a newer leader than the controller's
			// record right after an election; a dead leader is known here
			// before the controller marks it not alive.
			if l, e, _, ok := b.localLeader(t.Name, t.ID, i); ok && e >= a.LeaderEpoch {
				mp.Leader, mp.LeaderEpoch = l, e
			}
			mp.Replicas = a.Members()
			mp.ISR = []int32{}
			for _, r := range mp.Replicas {
				if rb, ok := md.Brokers[r]; ok && rb.Alive {
					mp.ISR = append(mp.ISR, r)
				}
			}
			if lb, ok := md.Brokers[mp.Leader]; !ok || !lb.Alive || b.cluster.PeerDown(mp.Leader) {
				// The leader is down: with one replica until it returns,
				// with more until another replica wins the raft election
				// and reports itself.
				mp.ErrorCode = kerr.LeaderNotAvailable.Code
				mp.Leader = -1
			}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	resp.Topics = append(resp.Topics, missing...)
	return resp
}

// findClusterCoordinator names the coordinator of a group: the raft
// leader of the group's partition of __consumer_offsets. This broker if
// it serves the group; else, if it has a replica of the partition, the
// leader its raft group knows; else the leader the controller's metadata
// names (reported by that leader, see reportLeaders). A named broker that
// has lost the leadership since answers NOT_COORDINATOR, so the client
// asks again.
func (b *Broker) findClusterCoordinator(listener, key string, resp *kmsg.FindCoordinatorResponse) {
	resp.NodeID = -1
	md := b.cluster.Metadata()
	ti := md.Topics[offsetsTopic]
	if ti == nil || len(ti.Partitions) == 0 {
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		msg := fmt.Sprintf("the controller has not created %s yet (it waits for %d alive brokers); retry", offsetsTopic, b.offsetsTopicBrokers(md))
		resp.ErrorMessage = &msg
		return
	}
	i := groupPartition(key, len(ti.Partitions))
	// The group's partition asleep with this broker as leader: its
	// election starts now, so that awaitElection waits for it rather
	// than for nothing.
	b.wakeDormant(offsetsTopic, i)
	c, _ := b.localCoordinator(key)
	b.answerCoordinator(listener, resp, c != nil, offsetsTopic, i, "the group's")
}
