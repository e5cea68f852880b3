// Package deploy holds simtel's deployment files — systemd units
// (systemd/), a docker compose setup (compose/), Kubernetes manifests
// (k8s/, and k8s-secure/ with TLS, SASL and ACLs), the Grafana dashboard (grafana/) and example configurations
// (examples/) — and the tests that keep them true to the binary: every
// file parses, every flag they pass exists in `simtel <cmd> --help` of the
// built binary, every metric the dashboard queries is served by a running
// broker, agent and sink, and the units pass systemd-analyze verify.
//
// The package has no Go code of its own; see README.md for how to use the
// files.
package deploy
