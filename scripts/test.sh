#!/usr/bin/env bash
# The project's test command: installs what the tests need, then runs vet,
# a gofmt check, every package's tests (unit, fuzz seeds, integration tests
# against real broker processes and kcat) and franz-go's own integration
# suite against `simtel broker`, once against one broker and once against a
# 3-broker cluster with KGO_TEST_RF=3, both secured (KGO_SUITE_TLS=1: TLS
# with required client certificates, --authorizer acl, SCRAM and
# OAUTHBEARER on a SASL listener; see scripts/kgo-suite.sh). On 3 brokers
# raft and the brokers' own Kafka client are on mutual TLS too (cluster
# TLS, kgo-suite.sh's default), as a site would run them; every other
# test exercises the plaintext path.
set -euo pipefail
cd "$(dirname "$0")/.."
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c"; done' EXIT
scripts/install-deps.sh
# A real single-host Slurm cluster with emulated nodes for slurm/'s
# end-to-end test (needs root; installs slurm-wlm and munge when missing).
if [ "$(id -u)" -eq 0 ] || [ -n "${CI:-}" ]; then
  eval "$(scripts/slurm-up.sh)"
  cleanup+=("scripts/slurm-down.sh >/dev/null 2>&1 || true")
else
  echo "not root: no Slurm test cluster (slurm/'s end-to-end test will skip)" >&2
fi
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './tests/*'))
if [ -n "$unformatted" ]; then
  echo "not gofmt-formatted (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi
# One simtel binary for every package's tests that run it as a process
# (brokers, agents, the CLI), instead of a link per test process.
bindir=$(mktemp -d)
chmod 755 "$bindir"
cleanup+=("rm -rf '$bindir'")
go build -o "$bindir/simtel" ./cmd/simtel
export SIMTEL_TEST_BINARY=$bindir/simtel
go test -count=1 -timeout 25m ./...
go test -count=1 -race -short -timeout 15m ./broker/... ./agent/...
KGO_SUITE_TLS=1 scripts/kgo-suite.sh
KGO_SUITE_TLS=1 KGO_SUITE_BROKERS=3 KGO_TEST_RECORDS=20000 scripts/kgo-suite.sh
