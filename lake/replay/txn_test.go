package replay

import (
	"strings"
	"testing"
	"time"
)

func TestPositionCompare(t *testing.T) {
	for _, c := range []struct {
		a, b Position
		want int
	}{
		{Position{1, 0, 0}, Position{1, 0, 0}, 0},
		{Position{1, 5, 9}, Position{2, 0, 0}, -1},
		{Position{2, 0, 0}, Position{1, 5, 9}, 1},
		{Position{1, 0, 9}, Position{1, 1, 0}, -1},
		{Position{1, 1, 3}, Position{1, 1, 4}, -1},
		{Position{0, 2, 4}, Position{0, 2, 3}, 1},
	} {
		if got := c.a.Compare(c.b); got != c.want {
			t.Errorf("%+v.Compare(%+v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestTxnConfigValidate(t *testing.T) {
	ok := TxnConfig{Brokers: []string{"b:1"}, Topic: "t", TransactionalID: "id"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.CommitRecords != DefaultCommitRecords || ok.CommitInterval != DefaultCommitInterval || ok.TxnTimeout != DefaultTxnTimeout || ok.Logger == nil {
		t.Errorf("defaults not filled in: %+v", ok)
	}
	for _, c := range []struct {
		mod  func(*TxnConfig)
		want string
	}{
		{func(c *TxnConfig) { c.Brokers = nil }, "no brokers"},
		{func(c *TxnConfig) { c.Topic = "" }, "no topic"},
		{func(c *TxnConfig) { c.TransactionalID = "" }, "no transactional id"},
		{func(c *TxnConfig) { c.CommitRecords = -1 }, "positive"},
		{func(c *TxnConfig) { c.TxnTimeout = 20 * time.Minute }, "1s to 15m"},
		{func(c *TxnConfig) { c.CommitInterval, c.TxnTimeout = 30*time.Second, 50*time.Second }, "twice the commit interval"},
	} {
		cfg := TxnConfig{Brokers: []string{"b:1"}, Topic: "t", TransactionalID: "id"}
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error with %q", err, c.want)
		}
	}
}

func TestPacerDelay(t *testing.T) {
	p := &Pacer{Speed: 1}
	if d := p.Delay(5e9); d != 0 {
		t.Errorf("before the first sample: got %v, want 0", d)
	}
	p.first, p.start = 0, time.Now()
	if d := p.Delay(3600e9); d < 59*time.Minute {
		t.Errorf("an hour ahead at 1x: got %v", d)
	}
	if d := p.Delay(-1e9); d != 0 {
		t.Errorf("a sample already due: got %v, want 0", d)
	}
	if d := (&Pacer{}).Delay(3600e9); d != 0 {
		t.Errorf("speed max: got %v, want 0", d)
	}
}
