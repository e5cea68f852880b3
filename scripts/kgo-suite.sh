#!/usr/bin/env bash
# Runs franz-go's own integration suite (pkg/kgo of github.com/twmb/franz-go
# v1.22.3, from the Go module proxy) against a fresh `simtel broker`, and
# prints which tests passed, failed and were skipped.
#
#   scripts/kgo-suite.sh                 # whole suite
#   scripts/kgo-suite.sh -run TestGroupETL   # extra args go to `go test`
#
# KGO_TEST_RECORDS (default here 100000) sets how many records the long
# tests produce. TestTxnEtl runs against a single broker; with more than
# one broker (KGO_SUITE_BROKERS > 1) it is skipped, since transactions are
# single-node only so far and the suite does not skip it on its own. Exit
# status is go test's.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=v1.22.3
work=$(mktemp -d /tmp/simtel-kgo-suite.XXXXXX)
port=${KGO_SUITE_PORT:-19092}
cleanup() {
  [ -n "${broker_pid:-}" ] && kill "$broker_pid" 2>/dev/null && wait "$broker_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/simtel" ./cmd/simtel
go mod download github.com/twmb/franz-go@$version
src=$(go env GOMODCACHE)/github.com/twmb/franz-go@$version
cp -r "$src" "$work/franz-go"
chmod -R u+w "$work/franz-go"

"$work/simtel" broker --node-id 0 --data-dir "$work/data" --listen 127.0.0.1:$port \
  --group-initial-rebalance-delay 0s --log-level warn 2>"$work/broker.log" &
broker_pid=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break
  sleep 0.1
done

skip=()
if [ "${KGO_SUITE_BROKERS:-1}" != 1 ]; then skip=(-skip '^TestTxnEtl$'); fi
status=0
( cd "$work/franz-go/pkg/kgo" && \
  KGO_SEEDS=127.0.0.1:$port KGO_TEST_RF=1 KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-100000} \
  go test -count=1 -timeout 15m -v "${skip[@]}" . "$@" ) >"$work/suite.log" 2>&1 || status=$?

grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok )' "$work/suite.log" | grep -v '=== RUN' | sed 's/^/  /' || true
echo "summary: $(grep -c -- '^--- PASS' "$work/suite.log" || true) passed, $(grep -c -- '^--- FAIL' "$work/suite.log" || true) failed, $(grep -c -- '^--- SKIP' "$work/suite.log" || true) skipped (top-level and subtests)"
if [ $status -ne 0 ]; then
  echo "--- suite output (tail) ---"; tail -n 80 "$work/suite.log"
  echo "--- broker log (tail) ---"; tail -n 40 "$work/broker.log"
fi
if ! kill -0 "$broker_pid" 2>/dev/null; then
  echo "broker process died during the suite:"; tail -n 40 "$work/broker.log"; status=1
fi
exit $status
