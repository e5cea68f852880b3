package deploy

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/simtel/simtel/internal/testutil"
)

// TestKubernetesSecure renders the k8s-secure overlay with kubectl
// kustomize and checks its workloads as TestKubernetes checks the base
// (flags, environment, references), and that the security settings hold
// together: every file a flag or variable names under a mounted Secret is
// one of the Secret's keys (the examples), and the agents and
// sinks speak the protocol of the broker listener SIMTEL_BROKERS points at.
func TestKubernetesSecure(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		testutil.SkipOrFail(t, "kubectl is not installed; deploy/k8s-secure is not rendered", "")
	}
	out, err := exec.Command(kubectl, "kustomize", "k8s-secure").Output()
	if err != nil {
		t.Fatalf("kubectl kustomize k8s-secure: %v", err)
	}
	rendered := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(rendered, out, 0o644); err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for _, d := range yamlDocs(t, rendered) {
		objs = append(objs, k8sObject{file: "k8s-secure", doc: d})
	}
	for _, example := range []string{"k8s-secure/secrets.example.yaml", "k8s/s3-secret.example.yaml"} {
		for _, d := range yamlDocs(t, filepath.FromSlash(example)) {
			objs = append(objs, k8sObject{file: example, doc: d})
		}
	}
	find := func(kind, name string) *k8sObject {
		for _, o := range objs {
			if o.kind() == kind && o.name() == name {
				return &o
			}
		}
		return nil
	}

	listeners := map[string]string{} // broker port → protocol
	clients := map[string]string{}   // workload → SIMTEL_SECURITY_PROTOCOL
	for _, o := range objs {
		switch o.kind() {
		case "StatefulSet", "DaemonSet", "Deployment":
		default:
			continue
		}
		checkWorkload(t, o, find)
		podSpec := m(o.doc, "spec", "template", "spec")
		secretKeys := map[string]map[string]bool{} // volume → file names
		for _, v := range l(podSpec, "volumes") {
			name := s(v, "secret", "secretName")
			if name == "" {
				continue
			}
			sec := find("Secret", name)
			if sec == nil {
				t.Errorf("%s: volume %s mounts Secret %s, which secrets.example.yaml does not show", o, s(v, "name"), name)
				continue
			}
			files := map[string]bool{}
			for _, it := range l(v, "secret", "items") {
				if _, ok := m(sec.doc, "stringData")[s(it, "key")]; !ok {
					t.Errorf("%s: volume %s takes key %s, which Secret %s does not have", o, s(v, "name"), s(it, "key"), name)
				}
				files[s(it, "path")] = true
			}
			secretKeys[s(v, "name")] = files
		}
		for _, c := range l(podSpec, "containers") {
			where := o.String() + " container " + s(c, "name")
			mounts := map[string]map[string]bool{} // mount path → files
			for _, vm := range l(c, "volumeMounts") {
				if files, ok := secretKeys[s(vm, "name")]; ok {
					mounts[strings.TrimSuffix(s(vm, "mountPath"), "/")] = files
				}
			}
			values := strs(l(c, "args"))
			for _, e := range l(c, "env") {
				values = append(values, s(e, "value"))
				if s(e, "name") == "SIMTEL_SECURITY_PROTOCOL" {
					clients[o.name()] = s(e, "value")
				}
			}
			for _, v := range values {
				_, path, _ := strings.Cut(v, "=")
				if !strings.HasPrefix(v, "--") {
					path = v
				}
				if files, ok := mounts[filepath.Dir(path)]; ok && !files[filepath.Base(path)] {
					t.Errorf("%s: %s names a file its Secret volume does not hold", where, v)
				}
				if list, ok := strings.CutPrefix(v, "--listeners="); ok {
					for _, one := range strings.Split(list, ",") {
						_, url, _ := strings.Cut(one, "=")
						proto, addr, _ := strings.Cut(url, "://")
						_, port, _ := net.SplitHostPort(addr)
						listeners[port] = proto
					}
				}
			}
			if len(mounts) == 0 {
				t.Errorf("%s: mounts no Secret", where)
			}
		}
	}

	cm := find("ConfigMap", "simtel-config")
	if cm == nil {
		t.Fatal("no ConfigMap simtel-config")
	}
	first, _, _ := strings.Cut(s(cm.doc, "data", "SIMTEL_BROKERS"), ",")
	_, port, err := net.SplitHostPort(first)
	if err != nil {
		t.Fatalf("SIMTEL_BROKERS %q: %v", first, err)
	}
	want := listeners[port]
	if want == "" {
		t.Fatalf("SIMTEL_BROKERS port %s is no listener of the brokers (%v)", port, listeners)
	}
	for _, w := range []string{"simtel-agent", "simtel-sink"} {
		if got := clients[w]; got != want {
			t.Errorf("%s: SIMTEL_SECURITY_PROTOCOL %q, but the brokers' listener on port %s is %s", w, got, port, want)
		}
	}
}
