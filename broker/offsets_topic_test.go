package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const offsetsTopic = "__consumer_offsets"

// TestConsumerOffsetsTopic checks the internal topic holding the group
// coordinator's state: it exists from the start, is reported internal,
// holds committed offsets as Kafka records that clients may read, refuses
// client writes, deletion, repartitioning and a non-compacting policy, and
// survives the deletion of other topics and a restart.
func TestConsumerOffsetsTopic(t *testing.T) {
	dir := t.TempDir()
	tb := startBroker(t, dir)
	ctx := ctxT(t, 60*time.Second)
	cl := tb.client()
	adm := kadm.NewClient(cl)

	// Reported, and internal.
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = nil // all topics
	resp, err := md.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mt := range resp.Topics {
		if mt.Topic != nil && *mt.Topic == offsetsTopic {
			found = true
			if !mt.IsInternal || mt.ErrorCode != 0 || len(mt.Partitions) != 1 {
				t.Fatalf("metadata of %s: internal %v, error %d, %d partitions", offsetsTopic, mt.IsInternal, mt.ErrorCode, len(mt.Partitions))
			}
		} else if mt.IsInternal {
			t.Fatalf("topic %v reported internal", mt.Topic)
		}
	}
	if !found {
		t.Fatalf("%s missing from metadata", offsetsTopic)
	}
	rc, err := adm.DescribeTopicConfigs(ctx, offsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := rc.On(offsetsTopic, nil); err != nil || !hasConfig(c, "cleanup.policy", "compact") || !hasConfig(c, "segment.bytes", "104857600") {
		t.Fatalf("configs of %s: %+v %v", offsetsTopic, c, err)
	}

	// Client writes and admin changes are refused.
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, offsetsTopic); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("create: %v", err)
	}
	prod := tb.client(kgo.RecordRetries(1), kgo.UnknownTopicRetries(1))
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: offsetsTopic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); !errors.Is(err, kerr.InvalidTopicException) {
		t.Fatalf("produce: %v", err)
	}
	dr, err := adm.DeleteTopics(ctx, offsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if err := dr[offsetsTopic].Err; !errors.Is(err, kerr.InvalidRequest) {
		t.Fatalf("delete: %v", err)
	}
	if cr, err := adm.CreatePartitions(ctx, 2, offsetsTopic); err == nil && cr[offsetsTopic].Err == nil {
		t.Fatal("create partitions accepted")
	}
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: kmsg.StringPtr("delete")}}, offsetsTopic)
	if err == nil {
		if r, _ := ar.On(offsetsTopic, nil); r.Err == nil {
			t.Fatal("cleanup.policy=delete accepted")
		}
	}

	// Offsets committed through the coordinator are Kafka records of
	// the topic, readable as soon as the commit returned.
	createTopicRF1(t, ctx, adm, "data", 2)
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "data", Partition: 1, At: 42, LeaderEpoch: -1, Metadata: "meta"})
	if r, err := adm.CommitOffsets(ctx, "g", commit); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}
	cons := tb.client(kgo.ConsumeTopics(offsetsTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for seen := false; !seen; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("committed offset never appeared in " + offsetsTopic)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			var k kmsg.OffsetCommitKey
			if k.ReadFrom(r.Key) != nil || k.Version > 1 {
				return
			}
			var v kmsg.OffsetCommitValue
			if err := v.ReadFrom(r.Value); err != nil {
				t.Fatalf("offset value: %v", err)
			}
			if k.Group == "g" && k.Topic == "data" && k.Partition == 1 && v.Offset == 42 && v.Metadata == "meta" {
				seen = true
			}
		})
	}

	// Deleting a topic drops its offsets (tombstones) but not the
	// internal topic.
	if _, err := adm.DeleteTopics(ctx, "data"); err != nil {
		t.Fatal(err)
	}
	createTopicRF1(t, ctx, adm, "data", 2)
	commit = kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "data", Partition: 0, At: 7, LeaderEpoch: -1})
	if r, err := adm.CommitOffsets(ctx, "g", commit); err != nil || r.Error() != nil {
		t.Fatalf("commit: %v %v", err, r.Error())
	}

	tb.stop()
	tb = startBroker(t, dir)
	adm = tb.admin()
	fr, err := adm.FetchOffsets(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fr.Lookup("data", 0); !ok || o.At != 7 {
		t.Fatalf("offset of data-0 after restart: %+v %v", o, ok)
	}
	if o, ok := fr.Lookup("data", 1); ok && o.At >= 0 {
		t.Fatalf("offset of deleted topic's partition survived: %+v", o)
	}
	td, err := adm.ListTopicsWithInternal(ctx, offsetsTopic)
	if err != nil || td[offsetsTopic].Err != nil || !td[offsetsTopic].IsInternal {
		t.Fatalf("%s after restart: %+v %v", offsetsTopic, td[offsetsTopic], err)
	}
}

func hasConfig(c kadm.ResourceConfig, name, value string) bool {
	for _, kv := range c.Configs {
		if kv.Key == name {
			return kv.Value != nil && *kv.Value == value
		}
	}
	return false
}
