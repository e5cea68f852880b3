package broker

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/simtel/simtel/broker/admin"
	"github.com/simtel/simtel/broker/cluster"
	"github.com/simtel/simtel/broker/partition"
	"github.com/simtel/simtel/broker/storage"
	"github.com/simtel/simtel/internal/fsutil"
)

// offsetsTopic is Kafka's internal topic of committed offsets and group
// metadata. The broker creates it at startup; the group coordinator's
// store is the log of its partition 0 (group.LogStore). Clients may read
// it but not write, delete or repartition it.
const offsetsTopic = admin.OffsetsTopic

// offsetsTopicConfigs are the overrides __consumer_offsets is created with.
var offsetsTopicConfigs = map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"}

// topic is a named set of partitions with its config overrides. The
// partitions slice and configs are replaced, never mutated, under b.mu so
// readers that took a *topic under RLock may use it without locking.
type topic struct {
	name    string
	id      [16]byte
	configs map[string]string
	parts   []*partition.Partition
}

// topicRecord is a topic's line in topics.json.
type topicRecord struct {
	Name       string            `json:"name"`
	ID         string            `json:"id"`
	Partitions int32             `json:"partitions"`
	Configs    map[string]string `json:"configs,omitempty"`
}

func (b *Broker) topicsFile() string { return filepath.Join(b.cfg.DataDir, "topics.json") }

func (b *Broker) partitionDir(t string, p int32) string {
	return filepath.Join(b.cfg.DataDir, "data", t+"-"+strconv.Itoa(int(p)))
}

func (b *Broker) loadTopics() error {
	data, err := os.ReadFile(b.topicsFile())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read topics: %w", err)
	}
	var recs []topicRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return fmt.Errorf("cannot parse %s: %w", b.topicsFile(), err)
	}
	for _, r := range recs {
		if b.cfg.clustered() {
			// A single-node topic file in a cluster broker's directory:
			// topics, __consumer_offsets included, now come from the
			// controller.
			b.log.Warn("ignoring a local topic in cluster mode", "topic", r.Name)
			continue
		}
		t := &topic{name: r.Name, configs: r.Configs}
		if t.configs == nil {
			t.configs = map[string]string{}
		}
		if raw, err := hex.DecodeString(r.ID); err == nil && len(raw) == 16 {
			copy(t.id[:], raw)
		}
		for i := int32(0); i < r.Partitions; i++ {
			p, err := b.openPartition(t, i)
			if err != nil {
				return err
			}
			t.parts = append(t.parts, p)
		}
		b.mu.topics[t.name] = t
	}
	return nil
}

// saveTopicsLocked writes topics.json from the map; caller holds adminMu.
func (b *Broker) saveTopicsLocked() error {
	b.mu.RLock()
	recs := make([]topicRecord, 0, len(b.mu.topics))
	for _, t := range b.mu.topics {
		if b.cfg.clustered() {
			continue // the controller holds these
		}
		recs = append(recs, topicRecord{Name: t.name, ID: hex.EncodeToString(t.id[:]), Partitions: int32(len(t.parts)), Configs: t.configs})
	}
	b.mu.RUnlock()
	sort.Slice(recs, func(i, j int) bool { return recs[i].Name < recs[j].Name })
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(b.topicsFile(), data)
}

func (b *Broker) openPartition(t *topic, i int32) (*partition.Partition, error) {
	dir := b.partitionDir(t.name, i)
	cfg := b.storageConfig(dir, t.configs)
	cfg.Durable = b.takeSynced(dir)
	l, err := storage.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot open partition %s-%d: %w", t.name, i, err)
	}
	p, err := partition.Open(l, partition.Config{Topic: t.name, Index: i, Settings: b.partitionSettings(t.configs),
		Logger: b.log, SnapshotInstalled: b.metrics.snapshotInstalls.Inc,
		ProducerIDExpiration: b.cfg.ProducerIDExpiration, ProducersExpired: b.metrics.producersExpired})
	if err != nil {
		l.Close()
		return nil, err
	}
	return p, nil
}

// syncDataDir makes the data directory's files durable with one
// syncfs(2) and records the partition directories it covered. A broker
// restarted after a crash (or with its host) would otherwise fsync the
// tail segment and the directory of every partition as it opens them:
// 20,000 fsyncs for 10,000 partitions, in the way of the restart. Where
// syncfs fails or is missing, each open syncs its files as before.
func (b *Broker) syncDataDir() {
	dir := filepath.Join(b.cfg.DataDir, "data")
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return
	}
	if err := fsutil.SyncFS(dir); err != nil {
		b.log.Info("cannot sync the data directory's file system at once; partitions sync their files as they open", "dir", dir, "err", err)
		return
	}
	b.synced.dirs = make(map[string]bool, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			b.synced.dirs[filepath.Join(dir, e.Name())] = true
		}
	}
}

// takeSynced reports whether dir was covered by syncDataDir and not
// opened since (a log closed and opened again may have written since).
func (b *Broker) takeSynced(dir string) bool {
	b.synced.Lock()
	defer b.synced.Unlock()
	ok := b.synced.dirs[dir]
	delete(b.synced.dirs, dir)
	return ok
}

func (b *Broker) topic(name string) *topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.mu.topics[name]
}

// partition returns the partition if this broker serves it: it has it
// and, for a replicated partition, is its raft leader. Otherwise nil, and
// absentPartitionCode says why.
func (b *Broker) partition(t string, p int32) *partition.Partition {
	part := b.localPartition(t, p)
	if part == nil || !part.IsLeader() {
		return nil
	}
	return part
}

// readPartition is partition for a read (Fetch, ListOffsets,
// OffsetForLeaderEpoch): also a replica whose group sleeps with this
// broker as its leader, whose log and high watermark are as the group
// left them; a read does not wake it (consumers poll idle partitions).
func (b *Broker) readPartition(t string, p int32) *partition.Partition {
	part := b.localPartition(t, p)
	if part == nil {
		return nil
	}
	if part.IsLeader() || b.dormantHere(part) {
		return part
	}
	return nil
}

// dormantHere: p's group sleeps with this broker as its leader.
func (b *Broker) dormantHere(p *partition.Partition) bool {
	l, _, ok := p.DormantLeader()
	return ok && l == b.cfg.NodeID
}

// servingPartition is readPartition checked against the client's current
// leader epoch: the partition, or the error code to answer for it.
func (b *Broker) servingPartition(t string, p, currentLeaderEpoch int32) (*partition.Partition, int16) {
	part := b.readPartition(t, p)
	if part == nil {
		return nil, b.absentPartitionCode(t, p)
	}
	if code := part.CheckLeaderEpoch(currentLeaderEpoch); code != 0 {
		return nil, code
	}
	return part, 0
}

// readablePartition is servingPartition for a request whose principal
// may not Describe the denied topics: those answer
// TOPIC_AUTHORIZATION_FAILED before the partition is looked up.
func (b *Broker) readablePartition(denied map[string]bool, t string, p, currentLeaderEpoch int32) (*partition.Partition, int16) {
	if denied[t] {
		return nil, kerr.TopicAuthorizationFailed.Code
	}
	return b.servingPartition(t, p, currentLeaderEpoch)
}

// localPartition returns the partition if this broker has a replica of it.
func (b *Broker) localPartition(t string, p int32) *partition.Partition {
	tp := b.topic(t)
	if tp == nil || p < 0 || int(p) >= len(tp.parts) {
		return nil
	}
	return tp.parts[p]
}

func (b *Broker) topicByID(id [16]byte) *topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, t := range b.mu.topics {
		if t.id == id {
			return t
		}
	}
	return nil
}

func (b *Broker) allTopics() []*topic {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return slices.SortedFunc(maps.Values(b.mu.topics), func(x, y *topic) int { return cmp.Compare(x.name, y.name) })
}

func (b *Broker) allPartitions() []*partition.Partition {
	var out []*partition.Partition
	for _, t := range b.allTopics() {
		for _, p := range t.parts {
			if p != nil { // nil: a partition another broker leads
				out = append(out, p)
			}
		}
	}
	return out
}

func (b *Broker) closePartitions() error {
	var err error
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range b.mu.topics {
		for _, p := range t.parts {
			if p != nil {
				err = errors.Join(err, p.Close())
			}
		}
	}
	b.mu.topics = map[string]*topic{}
	return err
}

// validTopicName follows Kafka's rules: 1-249 chars of [a-zA-Z0-9._-],
// not "." or "..".
func validTopicName(name string) error {
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name is %d characters, the limit is 249", len(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has %q; use letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return nil
}

// createTopic makes a topic; it returns a kerr error for the response.
func (b *Broker) createTopic(name string, partitions int32, rf int16, configs map[string]*string, validateOnly bool) (*topic, error) {
	if err := validTopicName(name); err != nil {
		return nil, fmt.Errorf("%w: %v", kerr.InvalidTopicException, err)
	}
	if b.cluster != nil {
		if name == offsetsTopic {
			return nil, fmt.Errorf("%w: %s is an internal topic; the controller creates it", kerr.InvalidRequest, name)
		}
		return b.clusterCreateTopic(name, partitions, rf, configs, validateOnly)
	}
	partitions, err := b.newTopicPartitions(partitions)
	if err != nil {
		return nil, err
	}
	if rf != -1 && rf != 1 {
		return nil, fmt.Errorf("%w: replication factor %d is larger than the 1 available broker", kerr.InvalidReplicationFactor, rf)
	}
	overrides, err := topicOverrides(configs)
	if err != nil {
		return nil, err
	}
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if b.topic(name) != nil {
		return nil, fmt.Errorf("%w: topic %q already exists", kerr.TopicAlreadyExists, name)
	}
	if validateOnly {
		return &topic{name: name, configs: overrides, parts: make([]*partition.Partition, partitions)}, nil
	}
	t := &topic{name: name, configs: overrides}
	_, _ = rand.Read(t.id[:])
	for i := int32(0); i < partitions; i++ {
		// A leftover directory from a topic of the same name deleted
		// before a crash must not leak old records into the new topic.
		_ = os.RemoveAll(b.partitionDir(name, i))
		p, err := b.openPartition(t, i)
		if err != nil {
			for _, q := range t.parts {
				_ = q.Remove()
			}
			return nil, fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
		}
		t.parts = append(t.parts, p)
	}
	b.mu.Lock()
	b.mu.topics[name] = t
	b.mu.Unlock()
	if err := b.saveTopicsLocked(); err != nil {
		b.mu.Lock()
		delete(b.mu.topics, name)
		b.mu.Unlock()
		for _, q := range t.parts {
			_ = q.Remove()
		}
		return nil, fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	}
	b.log.Info("topic created", "topic", name, "partitions", partitions)
	return t, nil
}

func (b *Broker) deleteTopic(name string) error {
	if name == offsetsTopic {
		return fmt.Errorf("%w: %s is an internal topic holding the committed offsets and group metadata; it cannot be deleted", kerr.InvalidRequest, name)
	}
	if name == txnStateTopic {
		return fmt.Errorf("%w: %s is an internal topic holding the transaction coordinator's state; it cannot be deleted", kerr.InvalidRequest, name)
	}
	if b.cluster != nil {
		return b.clusterDeleteTopic(name)
	}
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	b.mu.Lock()
	t := b.mu.topics[name]
	delete(b.mu.topics, name)
	b.mu.Unlock()
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	if err := b.saveTopicsLocked(); err != nil {
		b.mu.Lock()
		b.mu.topics[name] = t
		b.mu.Unlock()
		return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	}
	for _, p := range t.parts {
		if err := p.Remove(); err != nil {
			b.log.Warn("cannot remove deleted partition's files", "topic", name, "partition", p.Index(), "err", err)
		}
	}
	b.deleteTopicOffsets(name)
	b.log.Info("topic deleted", "topic", name)
	return nil
}

// newTopicPartitions is the partition count of a new topic asked for
// partitions (-1: the broker's default), or why it is refused.
func (b *Broker) newTopicPartitions(partitions int32) (int32, error) {
	if partitions == -1 {
		partitions = b.cfg.DefaultPartitions
	}
	if partitions <= 0 || partitions > cluster.MaxPartitions {
		return 0, fmt.Errorf("%w: partition count %d must be between 1 and %d", kerr.InvalidPartitions, partitions, cluster.MaxPartitions)
	}
	return partitions, nil
}

// topicOverrides checks the configs a CreateTopics request sets and
// returns those with a value (a nil value keeps the default).
func topicOverrides(configs map[string]*string) (map[string]string, error) {
	overrides := map[string]string{}
	for k, v := range configs {
		if err := admin.ValidateTopicConfig(k, v); err != nil {
			return nil, fmt.Errorf("%w: %v", kerr.InvalidConfig, err)
		}
		if v != nil {
			overrides[k] = *v
		}
	}
	return overrides, nil
}

// checkPartitionIncrease refuses growing topic name from have partitions
// to count (CreatePartitions) unless count is larger and within bounds.
func checkPartitionIncrease(name string, have int, count int32) error {
	if count <= int32(have) {
		return fmt.Errorf("%w: topic %q has %d partitions; the new count must be larger", kerr.InvalidPartitions, name, have)
	}
	if count > cluster.MaxPartitions {
		return fmt.Errorf("%w: partition count %d is above %d", kerr.InvalidPartitions, count, cluster.MaxPartitions)
	}
	return nil
}

func (b *Broker) createPartitions(name string, count int32, validateOnly bool) error {
	if b.cluster != nil {
		return b.clusterCreatePartitions(name, count, validateOnly)
	}
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	t := b.topic(name)
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	if name == offsetsTopic || name == txnStateTopic {
		return fmt.Errorf("%w: %s is an internal topic; its coordinator uses its partition 0 only", kerr.InvalidRequest, name)
	}
	if err := checkPartitionIncrease(name, len(t.parts), count); err != nil {
		return err
	}
	if validateOnly {
		return nil
	}
	parts := append([]*partition.Partition(nil), t.parts...)
	for i := int32(len(parts)); i < count; i++ {
		_ = os.RemoveAll(b.partitionDir(name, i))
		p, err := b.openPartition(t, i)
		if err != nil {
			for _, q := range parts[len(t.parts):] {
				_ = q.Remove()
			}
			return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
		}
		parts = append(parts, p)
	}
	nt := &topic{name: t.name, id: t.id, configs: t.configs, parts: parts}
	b.mu.Lock()
	b.mu.topics[name] = nt
	b.mu.Unlock()
	if err := b.saveTopicsLocked(); err != nil {
		return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	}
	b.log.Info("partitions added", "topic", name, "partitions", count)
	return nil
}

// setTopicConfigs replaces a topic's overrides and applies them to its logs.
func (b *Broker) setTopicConfigs(name string, update func(map[string]string) error, validateOnly bool) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	t := b.topic(name)
	if t == nil {
		return kerr.UnknownTopicOrPartition
	}
	next := maps.Clone(t.configs)
	if next == nil {
		next = map[string]string{}
	}
	if err := update(next); err != nil {
		return err
	}
	if policy, _ := b.effectiveTopicConfig(next, "cleanup.policy"); name == offsetsTopic && policy != "compact" {
		// Retention would delete group state that is still live.
		return fmt.Errorf("%w: %s must keep cleanup.policy=compact", kerr.InvalidConfig, name)
	}
	if validateOnly {
		return nil
	}
	if b.cluster != nil {
		return b.clusterSetTopicConfigs(name, next)
	}
	nt := &topic{name: t.name, id: t.id, configs: next, parts: t.parts}
	b.mu.Lock()
	b.mu.topics[name] = nt
	b.mu.Unlock()
	if err := b.saveTopicsLocked(); err != nil {
		return fmt.Errorf("%w: %v", kerr.KafkaStorageError, err)
	}
	for _, p := range t.parts {
		p.Log().UpdateConfig(b.storageConfig(b.partitionDir(name, p.Index()), next))
		p.SetSettings(b.partitionSettings(next))
	}
	return nil
}

// ensureOffsetsTopic creates __consumer_offsets if it does not exist yet
// and returns its partition 0. An existing topic keeps its overrides,
// except that it is switched to cleanup.policy=compact if it has another
// one: retention must never delete live group state.
func (b *Broker) ensureOffsetsTopic() (*partition.Partition, error) {
	t := b.topic(offsetsTopic)
	if t == nil {
		configs := map[string]*string{}
		for k, v := range offsetsTopicConfigs {
			configs[k] = &v
		}
		var err error
		if t, err = b.createTopic(offsetsTopic, 1, -1, configs, false); err != nil {
			return nil, fmt.Errorf("cannot create %s: %w", offsetsTopic, err)
		}
	} else if policy, _ := b.effectiveTopicConfig(t.configs, "cleanup.policy"); policy != "compact" {
		b.log.Warn("switching the internal topic to compaction", "topic", offsetsTopic, "cleanup.policy", policy)
		err := b.setTopicConfigs(offsetsTopic, func(c map[string]string) error {
			c["cleanup.policy"] = "compact"
			return nil
		}, false)
		if err != nil {
			return nil, fmt.Errorf("cannot set cleanup.policy of %s: %w", offsetsTopic, err)
		}
		t = b.topic(offsetsTopic)
	}
	if len(t.parts) == 0 {
		return nil, fmt.Errorf("internal topic %s has no partition", offsetsTopic)
	}
	return t.parts[0], nil
}

// effectiveTopicConfig resolves one config of a topic with overrides
// (admin.TopicConfig with the broker's defaults).
func (b *Broker) effectiveTopicConfig(overrides map[string]string, name string) (value string, source kmsg.ConfigSource) {
	return admin.TopicConfig(b.cfg.TopicDefaults, overrides, name)
}

func (b *Broker) configInt(overrides map[string]string, name string) int64 {
	return admin.TopicConfigInt(b.cfg.TopicDefaults, overrides, name)
}

// storageConfig turns a topic's configs into the log's Config.
func (b *Broker) storageConfig(dir string, overrides map[string]string) storage.Config {
	policy, _ := b.effectiveTopicConfig(overrides, "cleanup.policy")
	// storage.Config reads 0 as "default"; Kafka reads 0 as zero.
	zero := func(v, asZero int64) int64 {
		if v == 0 {
			return asZero
		}
		return v
	}
	return storage.Config{
		Dir:                dir,
		SegmentBytes:       b.configInt(overrides, "segment.bytes"),
		SegmentMs:          b.configInt(overrides, "segment.ms"),
		IndexIntervalBytes: int(b.configInt(overrides, "index.interval.bytes")),
		RetentionBytes:     zero(b.configInt(overrides, "retention.bytes"), 1),
		RetentionMs:        zero(b.configInt(overrides, "retention.ms"), 1),
		Compact:            strings.Contains(policy, "compact"),
		Delete:             strings.Contains(policy, "delete"),
		DeleteRetentionMs:  zero(b.configInt(overrides, "delete.retention.ms"), -1),
		MinCompactionLagMs: b.configInt(overrides, "min.compaction.lag.ms"),
		MaxBatchBytes:      int(b.configInt(overrides, "max.message.bytes")),
		Logger:             b.log.With("dir", dir),
	}
}

// partitionSettings are the configs a partition applies itself.
func (b *Broker) partitionSettings(overrides map[string]string) partition.Settings {
	policy, _ := b.effectiveTopicConfig(overrides, "cleanup.policy")
	tsType, _ := b.effectiveTopicConfig(overrides, "message.timestamp.type")
	hold, _ := b.effectiveTopicConfig(overrides, admin.HoldGroupsConfig)
	var groups []string
	for _, g := range strings.Split(hold, ",") {
		if g = strings.TrimSpace(g); g != "" {
			groups = append(groups, g)
		}
	}
	return partition.Settings{
		MaxMessageBytes: b.configInt(overrides, "max.message.bytes"),
		Compacted:       strings.Contains(policy, "compact"),
		LogAppendTime:   tsType == "LogAppendTime",
		HoldGroups:      groups,
	}
}

// adminBroker is the broker as the admin APIs see it (admin.Broker).
type adminBroker struct{ b *Broker }

func (a adminBroker) NodeID() int32            { return a.b.cfg.NodeID }
func (a adminBroker) Cluster() *cluster.Node   { return a.b.cluster }
func (a adminBroker) Logger() *slog.Logger     { return a.b.log }
func (a adminBroker) Security() admin.Security { return a.b.sec }

func (a adminBroker) Topic(name string) (admin.Topic, bool) {
	t := a.b.topic(name)
	if t == nil {
		return admin.Topic{}, false
	}
	return admin.Topic{ID: t.id, Partitions: len(t.parts), Configs: t.configs}, true
}

func (a adminBroker) TopicByID(id [16]byte) (string, bool) {
	if t := a.b.topicByID(id); t != nil {
		return t.name, true
	}
	return "", false
}

func (a adminBroker) CreateTopic(name string, partitions int32, rf int16, configs map[string]*string, validateOnly bool) (admin.Topic, error) {
	t, err := a.b.createTopic(name, partitions, rf, configs, validateOnly)
	if err != nil {
		return admin.Topic{}, err
	}
	return admin.Topic{ID: t.id, Partitions: len(t.parts), ReplicationFactor: a.b.createdReplicationFactor(name, rf), Configs: t.configs}, nil
}

func (a adminBroker) DeleteTopic(name string) error { return a.b.deleteTopic(name) }

func (a adminBroker) CreatePartitions(name string, count int32, validateOnly bool) error {
	return a.b.createPartitions(name, count, validateOnly)
}

func (a adminBroker) AlterTopicConfigs(name string, update func(map[string]string) error, validateOnly bool) error {
	b := a.b
	if b.cluster != nil && b.topic(name) == nil {
		// A topic created a moment ago through the controller may not
		// have reached this broker's copy of the metadata yet.
		ctx, cancel := context.WithTimeout(context.Background(), admin.Timeout)
		if err := b.cluster.CatchUp(ctx); err == nil {
			b.syncClusterTopics()
		}
		cancel()
	}
	return b.setTopicConfigs(name, update, validateOnly)
}

func (a adminBroker) TopicDefaults() map[string]string { return a.b.cfg.TopicDefaults }

func (a adminBroker) BrokerConfigs() map[string]string {
	cfg := a.b.cfg
	return map[string]string{
		"broker.id":                        strconv.Itoa(int(cfg.NodeID)),
		"auto.create.topics.enable":        strconv.FormatBool(!cfg.DisableAutoCreate),
		"num.partitions":                   strconv.Itoa(int(cfg.DefaultPartitions)),
		"default.replication.factor":       "1",
		"socket.request.max.bytes":         strconv.Itoa(int(cfg.MaxRequestBytes)),
		"log.dirs":                         cfg.DataDir,
		"log.retention.check.interval.ms":  strconv.FormatInt(cfg.RetentionCheckInterval.Milliseconds(), 10),
		"group.initial.rebalance.delay.ms": strconv.FormatInt(cfg.GroupInitialRebalanceDelay.Milliseconds(), 10),
	}
}

func (a adminBroker) Partition(topic string, i int32) *partition.Partition {
	return a.b.partition(topic, i)
}

func (a adminBroker) AbsentPartitionCode(topic string, i int32) int16 {
	return a.b.absentPartitionCode(topic, i)
}

func (a adminBroker) Internal(topic string) bool {
	return topic == offsetsTopic || topic == txnStateTopic
}

func (a adminBroker) Brokers(listener string) (clusterID string, controller int32, brokers []admin.BrokerAddr) {
	b := a.b
	if b.cluster == nil {
		host, port := b.advertised(listener)
		return b.clusterID, b.cfg.NodeID, []admin.BrokerAddr{{NodeID: b.cfg.NodeID, Host: host, Port: port}}
	}
	md := b.cluster.Metadata()
	clusterID = md.ClusterID
	if clusterID == "" {
		clusterID = b.clusterID
	}
	controller, _ = b.cluster.LeaderID()
	for _, br := range b.clusterBrokers(md) {
		if host, port, ok := brokerAddr(listener, br); ok {
			brokers = append(brokers, admin.BrokerAddr{NodeID: br.ID, Host: host, Port: port})
		}
	}
	return clusterID, controller, brokers
}
