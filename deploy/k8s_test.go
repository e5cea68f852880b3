package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// k8sObject is one manifest with the file it came from.
type k8sObject struct {
	file string
	doc  map[string]any
}

func (o k8sObject) kind() string { return s(o.doc, "kind") }
func (o k8sObject) name() string { return s(o.doc, "metadata", "name") }
func (o k8sObject) String() string {
	return fmt.Sprintf("%s %s/%s", o.file, o.kind(), o.name())
}

var apiVersions = map[string]string{
	"Namespace": "v1", "ConfigMap": "v1", "Secret": "v1", "Service": "v1",
	"StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Deployment": "apps/v1",
	"PodDisruptionBudget": "policy/v1", "PodMonitor": "monitoring.coreos.com/v1",
}

func readK8s(t *testing.T) []k8sObject {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for _, p := range paths {
		if filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		for _, d := range yamlDocs(t, p) {
			objs = append(objs, k8sObject{file: filepath.Base(p), doc: d})
		}
	}
	return objs
}

// matches reports whether every label of sel is in labels.
func matches(sel, labels map[string]any) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if s(labels[k]) != s(v) {
			return false
		}
	}
	return true
}

// TestKubernetes checks the manifests in deploy/k8s: every document
// parses and has its required fields; workloads use only flags of their
// command; names they refer to (Services, ConfigMaps, Secrets, volumes,
// ports) exist; and the broker, agent and sink have what they need.
func TestKubernetes(t *testing.T) {
	objs := readK8s(t)
	byKind := map[string][]k8sObject{}
	for _, o := range objs {
		byKind[o.kind()] = append(byKind[o.kind()], o)
		want, known := apiVersions[o.kind()]
		switch {
		case !known:
			t.Errorf("%s: unexpected kind", o)
		case s(o.doc, "apiVersion") != want:
			t.Errorf("%s: apiVersion %q, want %q", o, s(o.doc, "apiVersion"), want)
		}
		if o.name() == "" {
			t.Errorf("%s: no metadata.name", o)
		}
		if ns := s(o.doc, "metadata", "namespace"); o.kind() != "Namespace" && ns != "simtel" {
			t.Errorf("%s: namespace %q, want simtel", o, ns)
		}
	}
	find := func(kind, name string) *k8sObject {
		for _, o := range byKind[kind] {
			if o.name() == name {
				return &o
			}
		}
		return nil
	}

	// kustomization lists every manifest but the documented optional ones.
	kust := yamlDocs(t, filepath.Join("k8s", "kustomization.yaml"))[0]
	resources := strs(l(kust, "resources"))
	for _, r := range resources {
		if _, err := os.Stat(filepath.Join("k8s", r)); err != nil {
			t.Errorf("kustomization.yaml: resource %s: %v", r, err)
		}
	}
	files := map[string]bool{}
	for _, o := range objs {
		files[o.file] = true
	}
	for f := range files {
		optional := strings.HasSuffix(f, ".example.yaml") || f == "servicemonitor.yaml"
		if !optional && !slices.Contains(resources, f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}

	for _, kind := range []string{"StatefulSet", "DaemonSet", "Deployment"} {
		for _, o := range byKind[kind] {
			checkWorkload(t, o, find)
		}
	}

	// Brokers: stable identities, storage, probes, spread, disruption budget.
	sts := find("StatefulSet", "simtel-broker")
	if sts == nil {
		t.Fatal("no StatefulSet simtel-broker")
	}
	spec := m(sts.doc, "spec")
	podLabels := m(spec, "template", "metadata", "labels")
	svc := find("Service", s(spec, "serviceName"))
	switch {
	case svc == nil:
		t.Errorf("%s: serviceName %q is not a Service", sts, s(spec, "serviceName"))
	case s(svc.doc, "spec", "clusterIP") != "None":
		t.Errorf("%s: Service %s is not headless (clusterIP: None)", sts, svc.name())
	case !matches(m(svc.doc, "spec", "selector"), podLabels):
		t.Errorf("%s: headless Service %s does not select the broker pods", sts, svc.name())
	}
	if p := s(spec, "podManagementPolicy"); p != "Parallel" {
		t.Errorf("%s: podManagementPolicy %q, want Parallel", sts, p)
	}
	if n, _ := strconv.Atoi(s(spec, "replicas")); n < 3 {
		t.Errorf("%s: %d replicas, want at least 3", sts, n)
	}
	if len(l(spec, "volumeClaimTemplates")) == 0 {
		t.Errorf("%s: no volumeClaimTemplates", sts)
	}
	if m(spec, "template", "spec", "affinity", "podAntiAffinity") == nil {
		t.Errorf("%s: no podAntiAffinity: two brokers could share a node", sts)
	}
	broker := m(l(spec, "template", "spec", "containers")[0])
	if p := s(broker, "readinessProbe", "httpGet", "path"); p != "/readyz" {
		t.Errorf("%s: readiness probe %q, want /readyz", sts, p)
	}
	if p := s(broker, "livenessProbe", "httpGet", "path"); p != "/healthz" {
		t.Errorf("%s: liveness probe %q, want /healthz", sts, p)
	}
	dataDir := flagValue(strs(l(broker, "args")), "data-dir")
	onClaim := false
	for _, vm := range l(broker, "volumeMounts") {
		for _, vct := range l(spec, "volumeClaimTemplates") {
			if s(vm, "name") == s(vct, "metadata", "name") && strings.HasPrefix(dataDir, s(vm, "mountPath")) {
				onClaim = true
			}
		}
	}
	if !onClaim {
		t.Errorf("%s: --data-dir %q is not on a volumeClaimTemplate", sts, dataDir)
	}
	pdbOK := false
	for _, pdb := range byKind["PodDisruptionBudget"] {
		if matches(m(pdb.doc, "spec", "selector", "matchLabels"), podLabels) {
			pdbOK = true
		}
	}
	if !pdbOK {
		t.Errorf("no PodDisruptionBudget selects the broker pods")
	}

	// Agents: node-local ingest, spool on the node, policies in /dev/shm.
	ds := find("DaemonSet", "simtel-agent")
	if ds == nil {
		t.Fatal("no DaemonSet simtel-agent")
	}
	podSpec := m(ds.doc, "spec", "template", "spec")
	agent := m(l(podSpec, "containers")[0])
	hostPort := false
	for _, p := range l(agent, "ports") {
		if s(p, "hostPort") != "" {
			hostPort = true
		}
	}
	if s(podSpec, "hostNetwork") != "true" && !hostPort {
		t.Errorf("%s: neither hostNetwork nor a hostPort: processes on the node cannot reach the agent", ds)
	}
	args := strs(l(agent, "args"))
	for flag, wantPrefix := range map[string]string{"spool-dir": "", "policy-dir": "/dev/shm/"} {
		dir := flagValue(args, flag)
		if !strings.HasPrefix(dir, wantPrefix) {
			t.Errorf("%s: --%s %q, want it under %s", ds, flag, dir, wantPrefix)
		}
		if hostPathOf(podSpec, agent, dir) == "" {
			t.Errorf("%s: --%s %q is not on a hostPath volume: it would not outlive the pod or be seen on the node", ds, flag, dir)
		}
	}

	// Sinks: S3 credentials from a Secret.
	dep := find("Deployment", "simtel-sink")
	if dep == nil {
		t.Fatal("no Deployment simtel-sink")
	}
	sink := m(l(dep.doc, "spec", "template", "spec", "containers")[0])
	fromSecret := map[string]bool{}
	for _, e := range l(sink, "env") {
		if m(e, "valueFrom", "secretKeyRef") != nil {
			fromSecret[s(e, "name")] = true
		}
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if !fromSecret[k] {
			t.Errorf("%s: %s does not come from a Secret", dep, k)
		}
	}

	// Every simtel pod is scraped: annotations name its metrics port.
	for _, kind := range []string{"StatefulSet", "DaemonSet", "Deployment"} {
		for _, o := range byKind[kind] {
			ann := m(o.doc, "spec", "template", "metadata", "annotations")
			c := m(l(o.doc, "spec", "template", "spec", "containers")[0])
			port := ""
			for _, p := range l(c, "ports") {
				if s(p, "name") == "http" {
					port = s(p, "containerPort")
				}
			}
			if s(ann, "prometheus.io/scrape") != "true" || s(ann, "prometheus.io/port") != port || port == "" {
				t.Errorf("%s: prometheus.io annotations %v do not name the http port %q", o, ann, port)
			}
		}
	}
}

// hostPathOf returns the hostPath of the volume c has mounted at or above
// dir, or "".
func hostPathOf(podSpec, c map[string]any, dir string) string {
	for _, vm := range l(c, "volumeMounts") {
		mp := s(vm, "mountPath")
		if dir != mp && !strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/") {
			continue
		}
		for _, v := range l(podSpec, "volumes") {
			if s(v, "name") == s(vm, "name") {
				return s(v, "hostPath", "path")
			}
		}
	}
	return ""
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkWorkload checks one workload's pods: selector, commands and their
// flags, environment, references to ConfigMaps and Secrets, probe ports
// and volume mounts.
func checkWorkload(t *testing.T, o k8sObject, find func(kind, name string) *k8sObject) {
	t.Helper()
	spec := m(o.doc, "spec")
	if !matches(m(spec, "selector", "matchLabels"), m(spec, "template", "metadata", "labels")) {
		t.Errorf("%s: selector.matchLabels does not match the pod template's labels", o)
	}
	podSpec := m(spec, "template", "spec")
	volumes := map[string]bool{}
	for _, v := range l(podSpec, "volumes") {
		volumes[s(v, "name")] = true
	}
	for _, v := range l(spec, "volumeClaimTemplates") {
		volumes[s(v, "metadata", "name")] = true
	}
	containers := append(l(podSpec, "initContainers"), l(podSpec, "containers")...)
	for _, cv := range containers {
		c := m(cv)
		where := fmt.Sprintf("%s container %s", o, s(c, "name"))
		if s(c, "image") == "" {
			t.Errorf("%s: no image", where)
		}
		env := map[string]bool{}
		var envKeys []string
		for _, e := range l(c, "env") {
			env[s(e, "name")] = true
			envKeys = append(envKeys, s(e, "name"))
			if ref := m(e, "valueFrom", "secretKeyRef"); ref != nil {
				sec := find("Secret", s(ref, "name"))
				if sec == nil {
					t.Errorf("%s: env %s refers to Secret %q, which no manifest (or example) defines", where, s(e, "name"), s(ref, "name"))
				} else if _, ok := m(sec.doc, "stringData")[s(ref, "key")]; !ok && s(ref, "optional") != "true" {
					t.Errorf("%s: env %s refers to key %q missing from Secret %s", where, s(e, "name"), s(ref, "key"), sec.name())
				}
			}
		}
		var configKeys []string
		for _, ef := range l(c, "envFrom") {
			name := s(ef, "configMapRef", "name")
			cm := find("ConfigMap", name)
			if cm == nil {
				t.Errorf("%s: envFrom ConfigMap %q does not exist", where, name)
				continue
			}
			configKeys = append(configKeys, keys(m(cm.doc, "data"))...)
		}
		args := strs(l(c, "args"))
		if len(l(c, "command")) == 0 {
			// The image's entrypoint is simtel: args are a simtel command line.
			if len(args) == 0 {
				t.Errorf("%s: no simtel command in args", where)
			} else {
				checkArgs(t, where, args)
				checkEnv(t, where, envKeys, args[0])
			}
			// A shared ConfigMap's keys need only fit one simtel command.
			checkEnv(t, where+" (ConfigMap)", configKeys, "broker", "agent", "sink")
		}
		for _, a := range args {
			for _, ref := range envRef.FindAllStringSubmatch(a, -1) {
				if !env[ref[1]] {
					t.Errorf("%s: argument %q uses $(%s), which is not in env", where, a, ref[1])
				}
			}
		}
		ports := map[string]bool{}
		for _, p := range l(c, "ports") {
			ports[s(p, "name")] = true
			ports[s(p, "containerPort")] = true
		}
		for _, probe := range []string{"readinessProbe", "livenessProbe"} {
			if g := m(c, probe, "httpGet"); g != nil && !ports[s(g, "port")] {
				t.Errorf("%s: %s port %q is not a container port", where, probe, s(g, "port"))
			}
		}
		for _, vm := range l(c, "volumeMounts") {
			if !volumes[s(vm, "name")] {
				t.Errorf("%s: volumeMount %q has no volume", where, s(vm, "name"))
			}
		}
	}
}

// probePaths returns the HTTP probe paths of the simtel workloads, by
// command, for the test that asks running processes for them.
func probePaths(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range readK8s(t) {
		switch o.kind() {
		case "StatefulSet", "DaemonSet", "Deployment":
		default:
			continue
		}
		for _, cv := range l(o.doc, "spec", "template", "spec", "containers") {
			args := strs(l(cv, "args"))
			if len(args) == 0 {
				continue
			}
			for _, probe := range []string{"readinessProbe", "livenessProbe"} {
				if p := s(cv, probe, "httpGet", "path"); p != "" {
					out[args[0]] = append(out[args[0]], p)
				}
			}
		}
	}
	return out
}
