package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// checkListGroups: a subscribed consumer's group is listed as a classic
// group in state Stable; the type filter (ListGroups v5) and the state
// filter (v4) select it or leave it out as Kafka does.
func checkListGroups(ctx context.Context, broker string) (string, error) {
	adm, err := kafka.NewAdminClient(conf(broker))
	if err != nil {
		return "", err
	}
	defer adm.Close()
	const topic, group = "lrk-groups", "lrk-classic"
	if err := createTopic(ctx, adm, topic, 1, nil); err != nil {
		return "", err
	}
	c, err := kafka.NewConsumer(conf(broker, "group.id", group, "auto.offset.reset", "earliest", "session.timeout.ms", 10000))
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.Subscribe(topic, nil); err != nil {
		return "", err
	}
	// Poll until the group has assigned the partition (Stable).
	for {
		if ctx.Err() != nil {
			return "", fmt.Errorf("consumer never got its assignment: %w", ctx.Err())
		}
		c.Poll(100)
		if a, err := c.Assignment(); err == nil && len(a) == 1 {
			break
		}
	}

	list := func(opts ...kafka.ListConsumerGroupsAdminOption) ([]kafka.ConsumerGroupListing, error) {
		lctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		res, err := adm.ListConsumerGroups(lctx, opts...)
		if err != nil {
			return nil, err
		}
		if len(res.Errors) > 0 {
			return nil, fmt.Errorf("ListConsumerGroups errors: %v", res.Errors)
		}
		return res.Valid, nil
	}
	find := func(ls []kafka.ConsumerGroupListing) *kafka.ConsumerGroupListing {
		i := slices.IndexFunc(ls, func(l kafka.ConsumerGroupListing) bool { return l.GroupID == group })
		if i < 0 {
			return nil
		}
		return &ls[i]
	}

	// The group leaves PreparingRebalance/CompletingRebalance for Stable
	// shortly after the assignment: poll for it.
	var g *kafka.ConsumerGroupListing
	for {
		all, err := list()
		if err != nil {
			return "", fmt.Errorf("list all groups: %w", err)
		}
		if g = find(all); g != nil && g.State == kafka.ConsumerGroupStateStable {
			break
		}
		if ctx.Err() != nil {
			return "", fmt.Errorf("group %s never listed as Stable (last: %+v)", group, g)
		}
		c.Poll(100)
	}
	if g.Type != kafka.ConsumerGroupTypeClassic {
		return "", fmt.Errorf("group %s listed with type %v (%d), want classic", group, g.Type, int(g.Type))
	}
	if g.IsSimpleConsumerGroup {
		return "", fmt.Errorf("group %s listed as a simple group, want a consumer group", group)
	}

	cases := []struct {
		name string
		opt  kafka.ListConsumerGroupsAdminOption
		want bool
	}{
		{"types=classic", kafka.SetAdminMatchConsumerGroupTypes([]kafka.ConsumerGroupType{kafka.ConsumerGroupTypeClassic}), true},
		{"types=consumer", kafka.SetAdminMatchConsumerGroupTypes([]kafka.ConsumerGroupType{kafka.ConsumerGroupTypeConsumer}), false},
		{"states=stable", kafka.SetAdminMatchConsumerGroupStates([]kafka.ConsumerGroupState{kafka.ConsumerGroupStateStable}), true},
		{"states=empty", kafka.SetAdminMatchConsumerGroupStates([]kafka.ConsumerGroupState{kafka.ConsumerGroupStateEmpty}), false},
	}
	for _, tc := range cases {
		ls, err := list(tc.opt)
		if err != nil {
			return "", fmt.Errorf("list groups with %s: %w", tc.name, err)
		}
		got := find(ls)
		if (got != nil) != tc.want {
			return "", fmt.Errorf("list groups with %s: group %s listed=%v, want %v (%+v)", tc.name, group, got != nil, tc.want, ls)
		}
		if got != nil && got.Type != kafka.ConsumerGroupTypeClassic {
			return "", fmt.Errorf("list groups with %s: type %v, want classic", tc.name, got.Type)
		}
	}
	return fmt.Sprintf("group %s listed as type %v state %v; type and state filters select it", group, g.Type, g.State), nil
}
