package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/simtel/simtel/internal/testutil"
)

// composeService is what the checks need of one service.
type composeService struct {
	name    string
	raw     map[string]any
	command []string // interpolated
	env     map[string]string
	simtel  bool // runs the simtel image
}

// readCompose reads compose files as `docker compose -f a -f b` does: a
// later file's service replaces single values (command, entrypoint, image)
// and adds to maps (environment, depends_on) and to volumes, a mount of
// the same container path replacing the earlier one.
func readCompose(t *testing.T, files ...string) (map[string]any, map[string]*composeService) {
	t.Helper()
	var doc map[string]any
	for _, f := range files {
		docs := yamlDocs(t, filepath.Join("compose", f))
		if len(docs) != 1 {
			t.Fatalf("%s: got %d documents, want 1", f, len(docs))
		}
		if doc == nil {
			doc = docs[0]
			continue
		}
		for _, top := range []string{"services", "volumes"} {
			if doc[top] == nil {
				doc[top] = map[string]any{}
			}
			for name, v := range m(docs[0], top) {
				base := m(doc, top, name)
				if base == nil || top == "volumes" {
					doc[top].(map[string]any)[name] = v
					continue
				}
				mergeService(base, m(v))
			}
		}
	}
	services := map[string]*composeService{}
	for name, v := range m(doc, "services") {
		svc := &composeService{name: name, raw: m(v), env: map[string]string{}}
		for _, a := range strs(l(v, "command")) {
			svc.command = append(svc.command, interpolate(a))
		}
		for k, v := range m(v, "environment") {
			svc.env[k] = interpolate(s(v))
		}
		svc.simtel = strings.Contains(s(v, "image"), "SIMTEL_IMAGE") || strings.HasPrefix(s(v, "image"), "simtel:")
		services[name] = svc
	}
	return doc, services
}

// mergeService merges an override file's service into base.
func mergeService(base, over map[string]any) {
	for k, v := range over {
		switch k {
		case "environment", "depends_on":
			merged := map[string]any{}
			for _, mm := range []map[string]any{m(base, k), m(v)} {
				for kk, vv := range mm {
					merged[kk] = vv
				}
			}
			for _, d := range strs(l(base, k)) { // short form of depends_on
				merged[d] = map[string]any{"condition": "service_started"}
			}
			base[k] = merged
		case "volumes":
			target := func(v string) string {
				_, rest, _ := strings.Cut(v, ":")
				dst, _, _ := strings.Cut(rest, ":")
				return dst
			}
			var merged []any
			overs := strs(l(v))
			for _, b := range strs(l(base, k)) {
				replaced := false
				for _, o := range overs {
					replaced = replaced || target(o) == target(b)
				}
				if !replaced {
					merged = append(merged, b)
				}
			}
			for _, o := range overs {
				merged = append(merged, o)
			}
			base[k] = merged
		default:
			base[k] = v
		}
	}
}

// flagValue returns the value of --name in args (--name v or --name=v).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// TestCompose checks deploy/compose: services, flags, volumes, build
// files, mounts, dependencies, and that Prometheus scrapes every part.
func TestCompose(t *testing.T) {
	doc, services := readCompose(t, "compose.yaml")
	for _, want := range []string{"broker-0", "broker-1", "broker-2", "s3", "s3-init", "sink", "agent", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("service %s is missing (have %v)", want, keys(services))
		}
	}
	if t.Failed() {
		return
	}
	volumes := m(doc, "volumes")
	nodeIDs := map[string]string{}
	httpPorts := map[string]string{} // simtel service → its metrics port
	for _, name := range keys(services) {
		svc := services[name]
		where := "compose.yaml service " + name
		if svc.simtel {
			if len(svc.command) == 0 {
				t.Errorf("%s: runs simtel without a command", where)
				continue
			}
			checkArgs(t, where, svc.command)
			checkEnv(t, where, keys(svc.env), svc.command[0])
			for _, f := range []string{"http-listen", "listen-http"} {
				if v := flagValue(svc.command, f); v != "" {
					_, port, err := net.SplitHostPort(v)
					if err != nil {
						t.Errorf("%s: --%s %q: %v", where, f, v, err)
					}
					httpPorts[name] = port
				}
			}
			if httpPorts[name] == "" {
				t.Errorf("%s: serves no /metrics (no --http-listen or --listen-http)", where)
			}
		}
		if strings.HasPrefix(name, "broker-") {
			id := flagValue(svc.command, "node-id")
			if id != strings.TrimPrefix(name, "broker-") {
				t.Errorf("%s: --node-id %q, want the stable id %s", where, id, strings.TrimPrefix(name, "broker-"))
			}
			if other, dup := nodeIDs[id]; dup {
				t.Errorf("%s: node id %s is also %s's", where, id, other)
			}
			nodeIDs[id] = name
			if adv := flagValue(svc.command, "advertise"); adv != s(svc.raw, "hostname")+":9092" {
				t.Errorf("%s: --advertise %q does not name the service's hostname %q", where, adv, s(svc.raw, "hostname"))
			}
			dataDir := flagValue(svc.command, "data-dir")
			mounted := false
			for _, v := range strs(l(svc.raw, "volumes")) {
				src, dst, _ := strings.Cut(v, ":")
				if _, ok := volumes[src]; ok && strings.HasPrefix(dataDir, strings.Split(dst, ":")[0]) {
					mounted = true
				}
			}
			if !mounted {
				t.Errorf("%s: --data-dir %s is not on a named volume declared under volumes:", where, dataDir)
			}
		}
		// Build files and bind mounts must exist.
		if b := m(svc.raw, "build"); b != nil {
			ctx := filepath.Join("compose", s(b, "context"))
			df := s(b, "dockerfile")
			if df == "" {
				df = "Dockerfile"
			}
			if _, err := os.Stat(filepath.Join(ctx, df)); err != nil {
				t.Errorf("%s: build file: %v", where, err)
			}
		}
		checkMountsAndDeps(t, where, svc, volumes, services)
	}
	if c := s(services["sink"].raw, "depends_on", "s3-init", "condition"); c != "service_completed_successfully" {
		t.Errorf("sink: waits for s3-init with condition %q, want service_completed_successfully (the bucket must exist)", c)
	}
	if !strings.Contains(strings.Join(strs(l(services["s3-init"].raw, "command")), " "), "create-bucket") {
		t.Error("s3-init does not create a bucket")
	}

	// Prometheus scrapes every simtel service on its metrics port.
	scraped := map[string]bool{}
	for _, sc := range l(yamlDocs(t, filepath.Join("compose", "prometheus.yml"))[0], "scrape_configs") {
		for _, st := range l(sc, "static_configs") {
			for _, target := range strs(l(st, "targets")) {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("prometheus.yml: target %q: %v", target, err)
					continue
				}
				if host == "localhost" {
					continue
				}
				if services[host] == nil {
					t.Errorf("prometheus.yml: target %s is not a compose service", target)
				} else if services[host].simtel && httpPorts[host] != port {
					t.Errorf("prometheus.yml: target %s, but %s serves /metrics on port %q", target, host, httpPorts[host])
				}
				scraped[host] = true
			}
		}
	}
	for name := range httpPorts {
		if !scraped[name] {
			t.Errorf("prometheus.yml does not scrape %s", name)
		}
	}

	// Grafana loads the dashboard from where the provisioning points.
	prov := yamlDocs(t, filepath.Join("compose", "grafana", "provisioning", "dashboards", "simtel.yaml"))[0]
	path := s(l(prov, "providers")[0], "options", "path")
	found := false
	for _, v := range strs(l(services["grafana"].raw, "volumes")) {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == path {
			found = true
			if _, err := os.Stat(filepath.Join("compose", parts[0], "simtel.json")); err != nil {
				t.Errorf("grafana: dashboards mounted from %s: %v", parts[0], err)
			}
		}
	}
	if !found {
		t.Errorf("grafana: nothing is mounted at the provisioned dashboard path %s", path)
	}
	ds := yamlDocs(t, filepath.Join("compose", "grafana", "provisioning", "datasources", "prometheus.yaml"))[0]
	if u := s(l(ds, "datasources")[0], "url"); !strings.Contains(u, "prometheus:9090") {
		t.Errorf("grafana datasource url %q does not point at the prometheus service", u)
	}
}

// checkMountsAndDeps checks that a service's bind mounts exist, its named
// volumes are declared and the services it depends on are defined.
func checkMountsAndDeps(t *testing.T, where string, svc *composeService, volumes map[string]any, services map[string]*composeService) {
	t.Helper()
	for _, v := range strs(l(svc.raw, "volumes")) {
		src, _, _ := strings.Cut(v, ":")
		if strings.HasPrefix(src, ".") {
			if _, err := os.Stat(filepath.Join("compose", src)); err != nil {
				t.Errorf("%s: bind mount %s: %v", where, src, err)
			}
		} else if _, ok := volumes[src]; !ok {
			t.Errorf("%s: volume %s is not declared under volumes:", where, src)
		}
	}
	deps := keys(m(svc.raw, "depends_on"))                 // long form
	deps = append(deps, strs(l(svc.raw, "depends_on"))...) // short form
	for _, d := range deps {
		if services[d] == nil {
			t.Errorf("%s: depends on unknown service %s", where, d)
		}
	}
}

// TestPrometheusConfig parses prometheus.yml and, when promtool is
// installed, has it check the file.
func TestPrometheusConfig(t *testing.T) {
	path := filepath.Join("compose", "prometheus.yml")
	cfg := yamlDocs(t, path)[0]
	jobs := map[string]bool{}
	for i, sc := range l(cfg, "scrape_configs") {
		name := s(sc, "job_name")
		if name == "" || jobs[name] {
			t.Errorf("scrape config %d: job_name %q is empty or repeated", i, name)
		}
		jobs[name] = true
		if len(l(sc, "static_configs")) == 0 {
			t.Errorf("job %s has no static_configs", name)
		}
	}
	for _, want := range []string{"simtel-broker", "simtel-agent", "simtel-sink"} {
		if !jobs[want] {
			t.Errorf("no job %s (have %v)", want, keys(jobs))
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testutil.SkipOrFail(t, "promtool is not installed (apt-get install -y --no-install-recommends prometheus); the file was only parsed", "; scripts/install-deps.sh installs it under CI")
	}
	if out, err := exec.Command(promtool, "check", "config", "--syntax-only", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// TestDockerfiles checks what the compose build relies on: a cgo build
// for DuckDB on a glibc base, and the binary as the entrypoint.
func TestDockerfiles(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	for _, want := range []string{"CGO_ENABLED=1", "go build", "./cmd/simtel", "debian:", `ENTRYPOINT ["/usr/local/bin/simtel"]`, "USER simtel"} {
		if !strings.Contains(df, want) {
			t.Errorf("deploy/Dockerfile lacks %q", want)
		}
	}
	if regexp.MustCompile(`(?i)FROM\s+\S*(alpine|distroless/static|scratch)`).MatchString(df) {
		t.Error("deploy/Dockerfile uses a base without glibc; DuckDB's prebuilt libraries need glibc")
	}
	// The Go version of the build image is the module's.
	mod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(mod)
	if goVersion == nil || !strings.Contains(df, fmt.Sprintf("GO_VERSION=%s", goVersion[1])) {
		t.Errorf("deploy/Dockerfile does not build with go.mod's Go version %s", goVersion[1])
	}
	vgw, err := os.ReadFile(filepath.Join("compose", "Dockerfile.versitygw"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(vgw), "github.com/versity/versitygw/cmd/versitygw@") {
		t.Error("compose/Dockerfile.versitygw does not build versitygw from its Go module")
	}
	if !strings.Contains(string(vgw), `ENTRYPOINT ["/usr/local/bin/versitygw"]`) {
		t.Error("compose/Dockerfile.versitygw does not run versitygw")
	}
}
