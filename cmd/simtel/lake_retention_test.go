package main

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simtel/simtel/lake"
	"github.com/simtel/simtel/lake/store"
)

func TestLakeRetention(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(context.Background(), "file://"+dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	writeTestLake(t, s) // cpu (runs r1, r2) and reward (r1) on 2026-11-29, raw topic jobs
	lakeURL := "file://" + dir
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--measurement", "cpux", "--raw", "1d"}, `no data of measurement "cpux" (it has: cpu, reward)`},
		{[]string{"--topic", "nosuch", "--raw", "1d"}, `no data of topic "nosuch"`},
		{[]string{"--measurement", "cpu", "--raw", "30x"}, `--raw: retention "30x"`},
		{[]string{"--measurement", "cpu", "--raw", "-2d"}, "is negative"},
		{[]string{"--measurement", "cpu"}, "give at least one tier"},
		{[]string{"--measurement", "cpu", "--topic", "telemetry", "--raw", "1d"}, "not both"},
	} {
		_, _, err := runLake(t, append([]string{"retention", "set", "--lake", lakeURL}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("set %v: %v, want an error saying %q", c.args, err, c.err)
		}
	}
	// The rest of the lake is kept forever, so the test does not depend
	// on how long ago its dates are.
	if _, _, err := runLake(t, "retention", "set", "--lake", lakeURL, "--raw", "forever"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runLake(t, "retention", "set", "--lake", lakeURL, "--measurement", "gpu", "--raw", "1d", "--force"); err != nil {
		t.Errorf("set --force for a measurement not in the lake yet: %v", err)
	}
	out, _, err := runLake(t, "retention", "set", "--lake", lakeURL, "--measurement", "cpu", "--raw", "1d", "--1m", "2y")
	if err != nil || !strings.Contains(out, "retention of measurement cpu: raw 1d, 1m 2y") {
		t.Fatalf("set: %q, %v", out, err)
	}
	out, _, err = runLake(t, "retention", "show", "--lake", lakeURL, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"default,,30d,90d,forever,forever,forever", "lake,,forever,-,-,-,-", "measurement,cpu,1d,-,2y,-,-",
		"measurement,gpu,1d,-,-,-,-", "effective,cpu,1d,-,-,-,-", "effective,reward,forever,-,-,-,-"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}

	// The dry run lists cpu's two partitions and changes nothing.
	out, errOut, err := runLake(t, "retention", "apply", "--lake", lakeURL, "--dry-run", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 3 || rows[1][1] != "cpu" || rows[1][3] != "r1" || rows[2][3] != "r2" || rows[1][4] != "2026-11-29" {
		t.Fatalf("dry run listed %q (%v), want cpu r1 and r2 on 2026-11-29", out, err)
	}
	if !strings.Contains(errOut, "would expire 2 partitions (2 objects, 110 rows") {
		t.Errorf("dry run summary %q", errOut)
	}
	cpu := filepath.Join(dir, filepath.FromSlash(lake.TelemetryKey("cpu", "r1", "2026-11-29", "telemetry", 0, 0, 9)))
	lsBefore, _, _ := runLake(t, "ls", "--lake", lakeURL, "--format", "csv")
	if !strings.Contains(lsBefore, "cpu") {
		t.Fatalf("ls before: %s", lsBefore)
	}

	out, errOut, err = runLake(t, "retention", "apply", "--lake", lakeURL, "--grace", "0s")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "expired 2 partitions") || !strings.Contains(errOut, "deleted 2 objects") {
		t.Errorf("apply said %q", errOut)
	}
	ls, _, err := runLake(t, "ls", "--lake", lakeURL, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ls, "telemetry/cpu/") || !strings.Contains(ls, "telemetry/reward/") || !strings.Contains(ls, "raw/jobs/") {
		t.Errorf("ls after apply:\n%s\nwant reward and jobs, no cpu", ls)
	}
	if _, err := os.Stat(cpu); !os.IsNotExist(err) {
		t.Errorf("%s still there after apply --grace 0s: %v", cpu, err)
	}
}
