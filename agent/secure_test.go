package agent_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/simtel/simtel/agent"
	"github.com/simtel/simtel/internal/kafkasec/kafkasectest"
	"github.com/simtel/simtel/internal/testutil"
	"github.com/simtel/simtel/internal/testutil/brokertest"
)

// An agent whose brokers are behind SASL_SSL ships its samples, publishes
// a policy POSTed to it and installs that policy from the broker, all over
// the secure listener.
func TestAgentOverSASLSSL(t *testing.T) {
	b := kafkasectest.Start(t, brokertest.Topic("telemetry", 1))
	opts, err := b.SCRAM().Opts()
	if err != nil {
		t.Fatal(err)
	}
	policyDir := filepath.Join(t.TempDir(), "policy")
	a := startAgent(t, b.Secure, func(c *agent.Config) {
		c.ClientOpts = opts
		c.Policies = []string{"actor"}
		c.PolicyDir = policyDir
	})
	resp, err := http.Post("http://"+a.addrs["http"]+"/write?db=x", "text/plain", strings.NewReader("secure_sample v=1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("write answered %d", resp.StatusCode)
	}
	counts, _ := readTopic(t, b.Addr, "telemetry", 1, 30*time.Second)
	if _, ok := find(counts, "secure_sample"); !ok {
		t.Fatalf("the sample did not reach the broker over SASL_SSL: %v", counts)
	}

	resp, err = http.Post("http://"+a.addrs["http"]+"/v1/policy/actor", "application/octet-stream", strings.NewReader("weights over tls"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("policy POST answered %d", resp.StatusCode)
	}
	testutil.WaitFor(t, 30*time.Second, "the policy installed", func() error {
		got, err := os.ReadFile(filepath.Join(policyDir, "actor", "latest"))
		if err != nil {
			return err
		}
		if string(got) != "weights over tls" {
			return fmt.Errorf("latest holds %q", got)
		}
		return nil
	})
}
