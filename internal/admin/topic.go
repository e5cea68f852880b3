package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrUnknownTopic is returned by DescribeTopic for a topic the cluster does
// not list.
var ErrUnknownTopic = errors.New("topic does not exist")

// CreatedTopic is a topic CreateTopics made.
type CreatedTopic struct {
	Topic             string
	Partitions        int32
	ReplicationFactor int16
}

// CreateTopics creates topics with partitions and replicationFactor (-1:
// the broker's default) and configs. It returns the topics it created, in
// name order, and an error naming each topic it could not create.
func (c *Client) CreateTopics(ctx context.Context, partitions int32, replicationFactor int16, configs map[string]*string, topics ...string) ([]CreatedTopic, error) {
	c.waitAsLong(ctx)
	resps, err := c.adm.CreateTopics(ctx, partitions, replicationFactor, configs, topics...)
	if err != nil {
		return nil, reach(err)
	}
	var created []CreatedTopic
	failed := &topicErrors{verb: "create"}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			msg := r.Err.Error()
			if r.ErrMessage != "" {
				msg += ": " + r.ErrMessage
			}
			failed.add(r.Topic+": "+msg, r.Err)
			continue
		}
		created = append(created, CreatedTopic{r.Topic, r.NumPartitions, r.ReplicationFactor})
	}
	// kadm's Sorted orders by topic id; callers print topics by name.
	slices.SortFunc(created, func(a, b CreatedTopic) int { return strings.Compare(a.Topic, b.Topic) })
	return created, failed.orNil()
}

// TopicSummary is one topic of ListTopics.
type TopicSummary struct {
	Topic      string `json:"topic"`
	Partitions int    `json:"partitions"`
	Replicas   int    `json:"replication_factor"`
}

// ListTopics lists the topics in name order (nil when there are none),
// with the replica count of their first partition as replication factor.
func (c *Client) ListTopics(ctx context.Context) ([]TopicSummary, error) {
	td, err := c.adm.ListTopics(ctx)
	if err != nil {
		return nil, reach(err)
	}
	var rows []TopicSummary
	for _, t := range td.Sorted() {
		rf := 0
		if len(t.Partitions) > 0 {
			rf = len(t.Partitions[0].Replicas)
		}
		rows = append(rows, TopicSummary{t.Topic, len(t.Partitions), rf})
	}
	return rows, nil
}

// PartitionDetail is one partition of a TopicDetail.
type PartitionDetail struct {
	Partition int32   `json:"partition"`
	Leader    int32   `json:"leader"`
	Replicas  []int32 `json:"replicas"`
	ISR       []int32 `json:"isr"`
	Start     int64   `json:"start_offset"`
	End       int64   `json:"end_offset"`
}

// TopicDetail is what DescribeTopic shows of one topic. Start and End are
// -1 for a partition whose leader did not list its offsets in time;
// Unlisted then says what was not listed and why.
type TopicDetail struct {
	Topic      string            `json:"topic"`
	ID         string            `json:"id"`
	Partitions []PartitionDetail `json:"partitions"`
	Configs    map[string]string `json:"configs"`
	Unlisted   []string          `json:"unlisted,omitempty"`
}

// offsetsWait bounds how long DescribeTopic waits for the offsets and
// configs: each partition's leader lists its offsets, and a hung broker
// (stopped, cut off) holds a request until the caller gives up, while
// the leaders, replicas and ISR, which a user wants most when a broker
// hangs, come from any broker.
const offsetsWait = 5 * time.Second

// DescribeTopic returns a topic's partitions with their offsets, and its
// configs. A topic the cluster does not list is ErrUnknownTopic.
func (c *Client) DescribeTopic(ctx context.Context, topic string) (*TopicDetail, error) {
	td, err := c.adm.ListTopics(ctx, topic)
	if err != nil {
		return nil, reach(err)
	}
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return nil, fmt.Errorf("%q: %w", topic, ErrUnknownTopic)
	}
	octx, cancel := context.WithTimeout(ctx, offsetsWait)
	defer cancel()
	var (
		wg                 sync.WaitGroup
		starts, ends       kadm.ListedOffsets
		rcs                kadm.ResourceConfigs
		serr, eerr, cfgErr error
	)
	wg.Go(func() { starts, serr = c.adm.ListStartOffsets(octx, topic) })
	wg.Go(func() { ends, eerr = c.adm.ListEndOffsets(octx, topic) })
	wg.Go(func() { rcs, cfgErr = c.adm.DescribeTopicConfigs(octx, topic) })
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &TopicDetail{Topic: topic, ID: t.ID.String(), Configs: map[string]string{}}
	for what, err := range map[string]error{"start offsets": serr, "end offsets": eerr, "configs": cfgErr} {
		if err != nil {
			out.Unlisted = append(out.Unlisted, fmt.Sprintf("%s: %v", what, err))
		}
	}
	slices.Sort(out.Unlisted)
	offset := func(l kadm.ListedOffsets, p int32) int64 {
		if o, ok := l.Lookup(topic, p); ok && o.Err == nil {
			return o.Offset
		}
		return -1
	}
	for _, p := range t.Partitions.Sorted() {
		out.Partitions = append(out.Partitions, PartitionDetail{p.Partition, p.Leader, p.Replicas, p.ISR, offset(starts, p.Partition), offset(ends, p.Partition)})
	}
	if rc, err := rcs.On(topic, nil); err == nil {
		for _, cfg := range rc.Configs {
			out.Configs[cfg.Key] = cfg.MaybeValue()
		}
	}
	return out, nil
}

// DeleteTopics deletes topics and their data. It returns the topics it
// deleted, in name order, and an error naming each it could not delete.
func (c *Client) DeleteTopics(ctx context.Context, topics ...string) ([]string, error) {
	c.waitAsLong(ctx)
	resps, err := c.adm.DeleteTopics(ctx, topics...)
	if err != nil {
		return nil, reach(err)
	}
	var deleted []string
	failed := &topicErrors{verb: "delete"}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			failed.add(fmt.Sprintf("%s: %v", r.Topic, r.Err), r.Err)
			continue
		}
		deleted = append(deleted, r.Topic)
	}
	return deleted, failed.orNil()
}

// AlterTopicConfigs applies alters to a topic's configs.
func (c *Client) AlterTopicConfigs(ctx context.Context, topic string, alters []kadm.AlterConfig) error {
	resps, err := c.adm.AlterTopicConfigs(ctx, alters, topic)
	if err != nil {
		return reach(err)
	}
	for _, r := range resps {
		if r.Err != nil {
			return fmt.Errorf("cannot alter %s: %v %s", r.Name, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// SetPartitions grows a topic to n partitions.
func (c *Client) SetPartitions(ctx context.Context, topic string, n int) error {
	c.waitAsLong(ctx)
	resps, err := c.adm.UpdatePartitions(ctx, n, topic)
	if err != nil {
		return reach(err)
	}
	for _, r := range resps {
		if r.Err != nil {
			return fmt.Errorf("cannot set %s to %d partitions: %v %s", r.Topic, n, r.Err, r.ErrMessage)
		}
	}
	return nil
}

// topicErrors is the topics a request could not act on: its message names
// each with its error, and errors.Is sees each error (a kerr code).
type topicErrors struct {
	verb   string
	failed []string
	errs   []error
}

func (e *topicErrors) add(what string, err error) {
	e.failed = append(e.failed, what)
	e.errs = append(e.errs, err)
}

func (e *topicErrors) orNil() error {
	if len(e.errs) == 0 {
		return nil
	}
	return e
}

func (e *topicErrors) Error() string   { return "cannot " + e.verb + " " + strings.Join(e.failed, "; ") }
func (e *topicErrors) Unwrap() []error { return e.errs }
