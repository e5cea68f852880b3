package admin

import (
	"slices"
	"testing"
	"time"

	"github.com/simtel/simtel/internal/testutil/brokertest"
	"github.com/simtel/simtel/internal/testutil/brokertest/inproc"
)

func TestGroupReset(t *testing.T) {
	addr := inproc.Start(t, brokertest.GroupDelay(0)).Addr
	c, ctx := newClient(t, addr)
	if _, err := c.CreateTopics(ctx, 2, 1, nil, "t"); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	produce(t, ctx, addr, "t", 2, 5)

	commit := func(r Reset) []ResetMove {
		t.Helper()
		r.Group, r.Topics = "g", []string{"t"}
		plan, err := c.PlanReset(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CommitReset(ctx, plan); err != nil {
			t.Fatal(err)
		}
		return plan.Moves
	}
	moves := func(cur, new int64) []ResetMove {
		return []ResetMove{{"t", 0, cur, new}, {"t", 1, cur, new}}
	}
	steps := []struct {
		name string
		r    Reset
		want []ResetMove
	}{
		{"latest, nothing committed yet", Reset{Target: ToLatest}, moves(-1, 5)},
		{"shift back", Reset{Target: ShiftBy, Shift: -2}, moves(5, 3)},
		{"shift below the start", Reset{Target: ShiftBy, Shift: -9}, moves(3, 0)},
		{"to an offset", Reset{Target: ToOffset, Offset: 4}, moves(0, 4)},
		{"earliest", Reset{Target: ToEarliest}, moves(4, 0)},
		{"to a time before every record", Reset{Target: ToTime, Time: before.Add(-time.Second)}, moves(0, 0)},
	}
	for _, s := range steps {
		if got := commit(s.r); !slices.Equal(got, s.want) {
			t.Errorf("%s: moved %v, want %v", s.name, got, s.want)
		}
	}

	groups, err := c.ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Group != "g" {
		t.Errorf("groups %v, want g", groups)
	}
	d, err := c.DescribeGroup(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if d.TotalLag != 10 || len(d.Offsets) != 2 || d.Offsets[0].Committed != 0 || d.Offsets[0].End != 5 || d.Members != 0 {
		t.Errorf("describe: %+v; want 2 partitions committed at 0 of 5, total lag 10, no members", d)
	}
}
