package agent_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// influxAnswer is an InfluxDB error body: 1.x {"error"}, 2.x {"code","message"}.
type influxAnswer struct {
	Error   string `json:"error"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func postAnswer(t *testing.T, url, body string, want int) influxAnswer {
	t.Helper()
	b, header := postBody(t, url, body, want)
	var a influxAnswer
	if want != http.StatusNoContent {
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST %s: answer %q is not JSON: %v", url, b, err)
		}
		if h := header.Get("X-Influxdb-Error"); h != a.Error+a.Message {
			t.Errorf("POST %s: X-Influxdb-Error %q, body %q", url, h, b)
		}
	}
	return a
}

// metricValue is the value of the series named exactly series in a
// /metrics page, 0 if there is none (a counter with labels appears once it
// has counted), or -1 if it is not a number.
func metricValue(page, series string) float64 {
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return 0
}

// waitDelivered waits until the agent has had at least want samples
// acknowledged by the broker and dropped wantDropped for field type
// conflicts, then checks that it spooled exactly want (every POST was
// answered after its lines were spooled, so no more can come), reads them
// from the topic and returns them.
func waitDelivered(t *testing.T, br string, a *testAgent, want, wantDropped int) map[string]int {
	t.Helper()
	conflicts := `simtel_agent_samples_dropped_total{reason="field_type_conflict"}`
	var m string
	testutil.WaitFor(t, 30*time.Second, fmt.Sprintf("%d sent, %d dropped", want, wantDropped), func() error {
		m = metrics(t, a.addrs["http"])
		if metricValue(m, "simtel_agent_samples_sent_total") < float64(want) || metricValue(m, conflicts) < float64(wantDropped) {
			return fmt.Errorf("%s, %s", grepLines(m, "simtel_agent_samples_sent_total"), grepLines(m, conflicts))
		}
		return nil
	})
	if got := metricValue(m, "simtel_agent_samples_spooled_total"); got != float64(want) {
		t.Errorf("%v samples spooled, want %d", got, want)
	}
	if got := metricValue(m, conflicts); got != float64(wantDropped) {
		t.Errorf("%v lines dropped for field type conflicts, want %d", got, wantDropped)
	}
	counts, _ := readTopic(t, br, "telemetry", want, 30*time.Second)
	return counts
}

// checkIDs checks that the topic holds the lines tagged id=1..n once each
// and none tagged id=x… (the refused ones).
func checkIDs(t *testing.T, counts map[string]int, n int) {
	t.Helper()
	re := regexp.MustCompile(`[,]id=([^, ]+)`)
	seen := map[string]int{}
	for v, c := range counts {
		m := re.FindStringSubmatch(v)
		if m == nil {
			t.Errorf("record %q has no id tag", v)
			continue
		}
		if strings.HasPrefix(m[1], "x") {
			t.Errorf("refused line delivered: %q", v)
		}
		seen[m[1]] += c
	}
	for i := 1; i <= n; i++ {
		if c := seen[strconv.Itoa(i)]; c != 1 {
			t.Errorf("line id=%d delivered %d times, want once (records: %v)", i, c, counts)
		}
	}
}

// TestFieldTypeConflictsOverHTTP: a line giving a field of a measurement
// another type than the run accepted before is refused as InfluxDB
// refuses it — 400 on /write, 422 on /api/v2/write, InfluxDB's text — in
// the same body or a later one; the body's other lines are delivered, the
// refused ones are not; another run may use another type.
func TestFieldTypeConflictsOverHTTP(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	a := startAgent(t, br, nil)
	v1 := "http://" + a.addrs["http"] + "/write?db=sim"
	v2 := "http://" + a.addrs["http"] + "/api/v2/write?bucket=sim"
	conflict := func(field, meas, got, have string) string {
		return fmt.Sprintf(`field type conflict: input field "%s" on measurement "%s" is type %s, already exists as type %s`, field, meas, got, have)
	}

	// In one body: reward's value is a float from the first line on, a
	// plain 3 is a float too, 2i is not.
	ans := postAnswer(t, v1, "reward,env=a,id=1 value=1.5\nreward,env=a,id=x1 value=2i\nreward,env=b,id=2 value=3\nsteps,id=3 n=1i", 400)
	if want := "partial write: " + conflict("value", "reward", "integer", "float") + " dropped=1"; ans.Error != want {
		t.Errorf("/write answer %q,\nwant %q", ans.Error, want)
	}
	// Across bodies, on the v2 API.
	ans = postAnswer(t, v2, "reward,id=x2 value=\"high\"\nreward,id=4 value=4.5", 422)
	if want := "failure writing points to database: partial write: " + conflict("value", "reward", "string", "float") + " dropped=1"; ans.Code != "unprocessable entity" || ans.Message != want {
		t.Errorf("/api/v2/write answer %+v,\nwant code %q, message %q", ans, "unprocessable entity", want)
	}
	// Unsigned and float are not integer.
	ans = postAnswer(t, v1, "steps,id=x3 n=2u", 400)
	if want := "partial write: " + conflict("n", "steps", "unsigned", "integer") + " dropped=1"; ans.Error != want {
		t.Errorf("/write answer %q,\nwant %q", ans.Error, want)
	}
	ans = postAnswer(t, v2, "steps,id=x4 n=2.0", 422)
	if !strings.Contains(ans.Message, conflict("n", "steps", "float", "integer")) {
		t.Errorf("/api/v2/write answer %+v", ans)
	}
	postAnswer(t, v2, "steps,id=5 n=7i", http.StatusNoContent)
	// Another run (the sender's run tag wins over the agent's run-a) has
	// types of its own, and keeps to them.
	postAnswer(t, v1, "reward,run=run-b,id=6 value=5i", http.StatusNoContent)
	ans = postAnswer(t, v1, "reward,run=run-b,id=x5 value=5.5", 400)
	if !strings.Contains(ans.Error, conflict("value", "reward", "float", "integer")) {
		t.Errorf("/write answer %q", ans.Error)
	}
	// Malformed and conflicting lines in one body: 400 on both APIs,
	// naming the first malformed line, then the first conflict.
	ans = postAnswer(t, v1, "reward,id=7 value=6\nbroken\nreward,id=x6 value=t", 400)
	if want := "partial write: line 2: unable to parse 'broken': "; !strings.HasPrefix(ans.Error, want) ||
		!strings.HasSuffix(ans.Error, "; "+conflict("value", "reward", "boolean", "float")+" dropped=2") {
		t.Errorf("/write answer %q: want %q…; %s dropped=2", ans.Error, want, conflict("value", "reward", "boolean", "float"))
	}
	ans = postAnswer(t, v2, "reward,id=x7 value=f\nreward,id=8 value=7\nbad,tag value", 400)
	if want := "partial write error (1 written): line 3: unable to parse 'bad,tag value': "; ans.Code != "invalid" || !strings.HasPrefix(ans.Message, want) ||
		!strings.HasSuffix(ans.Message, "; "+conflict("value", "reward", "boolean", "float")) {
		t.Errorf("/api/v2/write answer %+v: want code invalid, message %q…; %s", ans, want, conflict("value", "reward", "boolean", "float"))
	}

	checkIDs(t, waitDelivered(t, br, a, 8, 7), 8)
}

// TestFieldTypesOffTakesEveryType: with the check turned off, lines of any
// type are taken as before.
func TestFieldTypesOffTakesEveryType(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	a := startAgent(t, br, func(c *agent.Config) { c.FieldTypesMemory = -1 })
	postAnswer(t, "http://"+a.addrs["http"]+"/write?db=sim", "reward,id=1 value=1.5\nreward,id=2 value=2i", http.StatusNoContent)
	checkIDs(t, waitDelivered(t, br, a, 2, 0), 2)
}

// TestFieldTypeConflictsWithoutAnswer: on the listeners that cannot answer
// (TCP, unix socket, UDP, StatsD) a conflicting line is dropped, counted in
// simtel_agent_samples_dropped_total{reason="field_type_conflict"} and
// logged; the other lines are delivered.
func TestFieldTypeConflictsWithoutAnswer(t *testing.T) {
	br := brokertest.Start(t, brokertest.GroupDelay(0)).Addr
	var log testutil.SyncBuffer
	a := startAgent(t, br, func(c *agent.Config) { c.Logger = slog.New(slog.NewTextHandler(&log, nil)) })
	send := func(network, addr, data string) {
		t.Helper()
		c, err := net.Dial(network, addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	send("tcp", a.addrs["tcp"], "tcp_m,id=1 v=1i\ntcp_m,id=x1 v=1.5\ntcp_m,id=2 v=2i\n")
	send("unix", a.addrs["unix"], "unix_m,id=3 v=\"a\"\nunix_m,id=x2 v=t\n")
	send("udp", a.addrs["udp"], "udp_m,id=4 v=t\nudp_m,id=x3 v=1u\n")
	// A StatsD set is a string field, a counter a float one.
	send("udp", a.addrs["statsd"], "sd:1|c|#id:5\nsd:x|s|#id:x4\n")

	checkIDs(t, waitDelivered(t, br, a, 5, 4), 5)
	for _, l := range []string{"tcp", "unix", "udp", "statsd"} {
		re := regexp.MustCompile(`msg="lines refused" listener=` + l + ` .*field_type_conflicts=1 .*conflict_example="field type conflict: `)
		if !re.MatchString(log.String()) {
			t.Errorf("no log line of the conflict on %s in:\n%s", l, log.String())
		}
	}
}
