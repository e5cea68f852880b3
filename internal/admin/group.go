package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrUnknownGroup is returned by DescribeGroup for a group the cluster does
// not know.
var ErrUnknownGroup = errors.New("group not found")

// GroupSummary is one group of ListGroups.
type GroupSummary struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
}

// ListGroups lists the consumer groups in name order (nil when there are
// none).
func (c *Client) ListGroups(ctx context.Context) ([]GroupSummary, error) {
	lg, err := c.adm.ListGroups(ctx)
	if err != nil {
		return nil, reach(err)
	}
	var rows []GroupSummary
	for _, g := range lg.Sorted() {
		rows = append(rows, GroupSummary{g.Group, g.State, g.ProtocolType})
	}
	return rows, nil
}

// GroupOffset is one partition of a GroupDetail.
type GroupOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed int64  `json:"committed"`
	End       int64  `json:"end"`
	Lag       int64  `json:"lag"`
	Member    string `json:"member,omitempty"`
}

// GroupDetail is what DescribeGroup shows of one group.
type GroupDetail struct {
	Group    string        `json:"group"`
	State    string        `json:"state"`
	Protocol string        `json:"protocol"`
	Members  int           `json:"members"`
	Offsets  []GroupOffset `json:"offsets"`
	TotalLag int64         `json:"total_lag"`
}

// DescribeGroup returns a group's state, its committed offsets and lag per
// partition, and the member that holds each. A group the cluster does not
// return is ErrUnknownGroup.
func (c *Client) DescribeGroup(ctx context.Context, group string) (*GroupDetail, error) {
	lags, err := c.adm.Lag(ctx, group)
	if err != nil {
		return nil, reach(err)
	}
	g, ok := lags[group]
	if !ok {
		return nil, fmt.Errorf("%q: %w", group, ErrUnknownGroup)
	}
	if err := g.Error(); err != nil {
		return nil, fmt.Errorf("cannot describe group %q: %w", group, err)
	}
	out := &GroupDetail{Group: g.Group, State: g.State, Protocol: g.Protocol, Members: len(g.Members)}
	for _, l := range g.Lag.Sorted() {
		r := GroupOffset{Topic: l.Topic, Partition: l.Partition, Committed: l.Commit.At, End: l.End.Offset, Lag: l.Lag}
		if l.Member != nil {
			r.Member = l.Member.ClientID + " " + l.Member.MemberID
		}
		out.Offsets = append(out.Offsets, r)
		if l.Lag > 0 {
			out.TotalLag += l.Lag
		}
	}
	return out, nil
}

// ResetTarget chooses where ResetPlan moves each partition's offset.
type ResetTarget int

const (
	ToEarliest ResetTarget = iota // each partition's log start
	ToLatest                      // each partition's end
	ToTime                        // the first record at or after Reset.Time
	ToOffset                      // Reset.Offset for every partition
	ShiftBy                       // the committed offset plus Reset.Shift, at least 0
)

// Reset is a request to move a group's committed offsets.
type Reset struct {
	Group  string
	Topics []string
	Target ResetTarget
	Time   time.Time // ToTime
	Offset int64     // ToOffset
	Shift  int64     // ShiftBy; negative moves back
}

// ResetMove is one partition of a ResetPlan: its committed offset (-1:
// none) and the new one.
type ResetMove struct {
	Topic     string
	Partition int32
	Current   int64
	New       int64
}

// ResetPlan is what a Reset would commit, in topic and partition order.
type ResetPlan struct {
	Group string
	Moves []ResetMove
}

// PlanReset computes the new offset of every partition of r.Topics from
// the partitions' offsets and the group's committed ones. It changes
// nothing.
func (c *Client) PlanReset(ctx context.Context, r Reset) (*ResetPlan, error) {
	listed, err := c.listFor(ctx, r)
	if err != nil {
		return nil, reach(err)
	}
	if err := listed.Error(); err != nil {
		return nil, fmt.Errorf("cannot list offsets of %s: %w", strings.Join(r.Topics, ","), err)
	}
	current, err := c.adm.FetchOffsets(ctx, r.Group)
	if err != nil {
		return nil, fmt.Errorf("cannot fetch committed offsets of %q: %w", r.Group, err)
	}
	target := kadm.Offsets{}
	listed.Each(func(o kadm.ListedOffset) {
		target.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: r.newOffset(o, current), LeaderEpoch: -1})
	})
	plan := &ResetPlan{Group: r.Group}
	for _, o := range target.Sorted() {
		cur := int64(-1)
		if c, ok := current.Lookup(o.Topic, o.Partition); ok {
			cur = c.At
		}
		plan.Moves = append(plan.Moves, ResetMove{o.Topic, o.Partition, cur, o.At})
	}
	return plan, nil
}

// listFor lists the partitions' offsets that r's target starts from.
func (c *Client) listFor(ctx context.Context, r Reset) (kadm.ListedOffsets, error) {
	switch r.Target {
	case ToEarliest:
		return c.adm.ListStartOffsets(ctx, r.Topics...)
	case ToTime:
		return c.adm.ListOffsetsAfterMilli(ctx, r.Time.UnixMilli(), r.Topics...)
	default:
		return c.adm.ListEndOffsets(ctx, r.Topics...)
	}
}

// newOffset is the offset r moves partition o to.
func (r Reset) newOffset(o kadm.ListedOffset, current kadm.OffsetResponses) int64 {
	switch r.Target {
	case ToOffset:
		return r.Offset
	case ShiftBy:
		at := r.Shift
		if c, ok := current.Lookup(o.Topic, o.Partition); ok && c.At >= 0 {
			at = c.At + r.Shift
		}
		return max(at, 0)
	}
	return o.Offset
}

// CommitReset commits a plan's new offsets for its group. The broker
// refuses while the group has active members.
func (c *Client) CommitReset(ctx context.Context, plan *ResetPlan) error {
	offsets := kadm.Offsets{}
	for _, m := range plan.Moves {
		offsets.Add(kadm.Offset{Topic: m.Topic, Partition: m.Partition, At: m.New, LeaderEpoch: -1})
	}
	resp, err := c.adm.CommitOffsets(ctx, plan.Group, offsets)
	if err != nil {
		return fmt.Errorf("cannot commit offsets for %q: %w", plan.Group, err)
	}
	if err := resp.Error(); err != nil {
		return fmt.Errorf("cannot commit offsets for %q (are its consumers still running?): %w", plan.Group, err)
	}
	return nil
}
