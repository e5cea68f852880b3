package broker_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/simtel/simtel/internal/testutil"
)

// groupSessionErrors records the errors that ended a member's group
// session (franz-go then hands the application "unable to join group
// session: …").
type groupSessionErrors struct {
	mu   sync.Mutex
	errs []error
}

func (g *groupSessionErrors) OnGroupManageError(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.errs = append(g.errs, err)
}

func (g *groupSessionErrors) list() []error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]error(nil), g.errs...)
}

// offsetsPartitionOf is the partition of __consumer_offsets (6 in a
// cluster) that holds a group, as the broker maps it.
func offsetsPartitionOf(groupID string) int32 {
	h := fnv.New32a()
	h.Write([]byte(groupID))
	return int32(h.Sum32() % 6)
}

// TestClusterGroupJoinSurvivesCoordinatorStepDown: a member's JoinGroup
// waits in the coordinator for a rebalance (another member has not
// rejoined yet) longer than the member's session timeout, which is also
// how long franz-go retries a JoinGroup in all; then the coordinator's
// broker loses the raft leadership of the group's offsets partition (both
// followers are stopped for longer than the leader lease, as a loaded
// machine does to a leader that cannot hear its followers in time) and is
// elected again once they are back, nobody else having led. This is what
// franz-go's TestGroupETL met on three loaded brokers: the coordinator was
// closed at each step-down, the waiting JoinGroup failed with
// COORDINATOR_NOT_AVAILABLE, its retries were already used up, and the
// member's session ended ("unable to join group session"). The
// coordinator must instead wait, paused, and go on where it stopped: the
// waiting member gets into the group once the other one rejoins, without
// its session ending.
func TestClusterGroupJoinSurvivesCoordinatorStepDown(t *testing.T) {
	bs, controller, seeds, ctx := startGroupCluster(t, 6*time.Minute)

	const topic = "stepdown"
	createTopic(t, ctx, []string{bs[controller].Addr}, topic, 3, 3)
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// A self re-election is the case under test; a stop may instead end
	// with a follower elected (raft's timers decide, and the coordinator's
	// broker wins only about a third of the time), so try up to 8 times.
	const trials = 8
	reelected := 0
	for trial := 1; trial <= trials && reelected == 0; trial++ {
		groupID := fmt.Sprintf("stepdown-%d", trial)
		part := offsetsPartitionOf(groupID)
		coord := findCoordinator(t, ctx, admin, 0, groupID)
		var stop []*clusterBroker
		for _, b := range bs {
			if int32(b.ID) != coord {
				stop = append(stop, b)
			}
		}
		// On a loaded machine another broker may win the partition for a
		// while (and hand it back) at any point of the trial, also before
		// the stop; the coordinator rightly closes then. Their logs tell.
		othersLed := leaderStatesOf(t, stop, part)

		// Member B gets into the group, then withholds its rejoin
		// (rebalances wait for the application to allow them).
		assigned := make(chan struct{}, 1)
		b, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
			kgo.SessionTimeout(45*time.Second), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
				select {
				case assigned <- struct{}{}:
				default:
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		// A poll blocks rebalances until AllowRebalance: allowed until
		// B has its partitions, then not.
		for got := false; !got; {
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			b.PollFetches(pctx)
			pcancel()
			select {
			case <-assigned:
				got = true
			default:
				b.AllowRebalance()
			}
			if ctx.Err() != nil {
				t.Fatal("member B never got into the group")
			}
		}

		// Member C joins: the rebalance waits for B, so C's JoinGroup
		// blocks in the coordinator.
		cErrs := &groupSessionErrors{}
		cAssigned := make(chan struct{}, 1)
		c, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(groupID), kgo.ConsumeTopics(topic),
			kgo.SessionTimeout(6*time.Second), kgo.WithHooks(cErrs),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				if len(m[topic]) > 0 {
					select {
					case cAssigned <- struct{}{}:
					default:
					}
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		cstop := goUntilStopped(ctx, func(cctx context.Context) {
			for cctx.Err() == nil {
				c.PollFetches(cctx)
			}
		})
		waitUntil(t, 60*time.Second, "the group rebalances for member C", func() string {
			dg, err := kadm.NewClient(admin).DescribeGroups(ctx, groupID)
			if err != nil {
				return err.Error()
			}
			if s := dg[groupID].State; s != "PreparingRebalance" {
				return "group state " + s
			}
			return ""
		})
		// Longer than C's retry budget for one JoinGroup.
		time.Sleep(8 * time.Second)

		_, epoch := leaderOf(ctx, []string{bs[coord].Addr}, "__consumer_offsets", part)
		for _, s := range stop {
			testutil.Pause(t, s.Proc.Cmd.Process)
		}
		time.Sleep(3 * time.Second)
		for _, s := range stop {
			if err := s.Proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
		var leader, newEpoch int32
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			leader, newEpoch = leaderOf(ctx, []string{bs[coord].Addr}, "__consumer_offsets", part)
			if (leader >= 0 && newEpoch > epoch) || time.Now().After(deadline) {
				break
			}
		}
		if leader < 0 || newEpoch <= epoch {
			// The leader's lease outlived the stop (raft checks it on
			// its own timer, which a loaded machine delays): there was
			// no step-down to survive.
			cstop()
			c.Close()
			b.Close()
			t.Logf("trial %d: no later term within 60s of the stop (leader %d epoch %d, was %d), not the case under test (load %s)",
				trial, leader, newEpoch, epoch, loadAvg())
			continue
		}
		t.Logf("trial %d: group %s on offsets partition %d, coordinator broker %d (epoch %d); followers %d and %d stopped 3s; now led by %d in epoch %d (load %s)",
			trial, groupID, part, coord, epoch, stop[0].ID, stop[1].ID, leader, newEpoch, loadAvg())

		// B rejoins: the rebalance completes and C gets its share.
		b.AllowRebalance()
		bstop := goUntilStopped(ctx, func(bctx context.Context) {
			for bctx.Err() == nil {
				b.PollFetches(bctx)
				b.AllowRebalance()
			}
		})
		deadline := time.After(60 * time.Second)
		joined := false
		for !joined && len(cErrs.list()) == 0 {
			select {
			case <-cAssigned:
				joined = true
			case <-deadline:
				t.Fatalf("trial %d: member C got no partitions within 60s of the step-down", trial)
			case <-time.After(100 * time.Millisecond):
			}
		}
		errs := cErrs.list()
		cstop()
		bstop()
		c.Close()
		b.Close()
		if leader != coord {
			t.Logf("trial %d: broker %d took the partition over, not the case under test (member C: %v)", trial, leader, errors.Join(errs...))
			continue
		}
		if leaderStatesOf(t, bs, part) == 0 {
			t.Fatalf("no broker's log shows it leading offsets partition %d: leaderStatesOf no longer matches the log", part)
		}
		if n := leaderStatesOf(t, stop, part); n > othersLed {
			t.Logf("trial %d: another broker led the partition during the trial (%d leader terms), not the case under test (member C: %v)", trial, n-othersLed, errors.Join(errs...))
			continue
		}
		reelected++
		if len(errs) > 0 {
			t.Fatalf("trial %d: member C's group session ended while its JoinGroup waited in the coordinator, which stepped down and was elected again: %v",
				trial, errors.Join(errs...))
		}
		t.Logf("trial %d: member C's JoinGroup went through the step-down and the re-election; C got its partitions", trial)
	}
	if reelected == 0 {
		t.Fatalf("in %d trials the coordinator's broker was never elected again after its followers came back", trials)
	}
}

// leaderStatesOf counts the brokers' log lines that show them leading the
// offsets partition part: reporting its leadership, coordinating its
// groups, or handing it back to its preferred leader (a broker that led
// it only briefly may log just one of them).
func leaderStatesOf(t *testing.T, bs []*clusterBroker, part int32) int {
	t.Helper()
	re := regexp.MustCompile(fmt.Sprintf(`msg="leading partition" topic=__consumer_offsets partition=%[1]d( |$)|`+
		`msg="coordinating the groups of an offsets partition[^"]*" partition=%[1]d( |$)|`+
		`msg="leadership handed back to the preferred leader" partition=__consumer_offsets-%[1]d( |$)`, part))
	n := 0
	for _, b := range bs {
		data, err := os.ReadFile(b.Proc.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if re.MatchString(line) {
				n++
			}
		}
	}
	return n
}
