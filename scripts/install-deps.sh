#!/usr/bin/env bash
# Installs what the tests need on a fresh Debian machine: kcat (librdkafka's
# command-line client) and, when Node.js is present, the npm packages of
# tests/kafkajs. Idempotent; needs root (or sudo) only when something is
# missing.
set -euo pipefail

need=()
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)   # deploy/: systemd-analyze verify of the units
command -v promtool >/dev/null 2>&1 || need+=(prometheus)       # deploy/: promtool check config/rules
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client) # deploy/: kubectl kustomize of deploy/k8s-secure
command -v openssl >/dev/null 2>&1 || need+=(openssl)           # deploy/: compose/secure/certs.sh; scripts/kgo-suite.sh's certificates
command -v curl >/dev/null 2>&1 || need+=(curl ca-certificates) # scripts/kgo-suite.sh: brokers' metrics while a cluster forms
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)   # lake/pgwire: psql against simtel lake serve
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql) # lake/iceberg: the Iceberg SQL catalog in PostgreSQL
command -v jq >/dev/null 2>&1 || need+=(jq)                     # bench/fanout-netns.sh: the steps' JSON
command -v tc >/dev/null 2>&1 || need+=(iproute2)              # bench/fanout-netns.sh: ip netns, veth pairs, tc rate limits
/usr/bin/python3 -c 'import psycopg2, pandas' >/dev/null 2>&1 || need+=(python3-psycopg2 python3-pandas) # lake/pgwire: psycopg2 and pandas.read_sql (Debian's python, not pyenv's)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "installing: ${need[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
kcat -V 2>&1 | head -1 >&2

# npm packages for the KafkaJS compatibility test (broker/kafkajs_test.go)
# and for the Iceberg readers iceberg-js and icebird (TestLakeServeIceberg in
# cmd/simtel), pinned by tests/*/package-lock.json. Only when Node.js is
# present; without it those tests skip (and fail under CI=true).
root="$(cd "$(dirname "$0")/.." && pwd)"
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  npm ci --prefix "$root/tests/kafkajs" --no-audit --no-fund --loglevel=error >&2
  npm ci --prefix "$root/tests/iceberg-js" --no-audit --no-fund --loglevel=error >&2
  echo "node $(node --version), kafkajs installed in tests/kafkajs/node_modules, iceberg-js and icebird in tests/iceberg-js/node_modules" >&2
else
  echo "node/npm not found: tests/kafkajs and tests/iceberg-js not installed (TestKafkaJS and TestLakeServeIceberg's JavaScript readers will skip)" >&2
fi

# confluent-kafka-go (static librdkafka 2.11, cgo) for the librdkafka
# compatibility checks (tests/librdkafka, run by broker/librdkafka_test.go):
# a module of its own, fetched from the Go module proxy; needs gcc.
command -v gcc >/dev/null 2>&1 || echo "gcc not found: TestLibrdkafka cannot build tests/librdkafka" >&2
(cd "$root/tests/librdkafka" && go mod download)

# versitygw, a real S3-compatible server, for the sink and lake tests
# (internal/testutil.StartS3). Built once from the Go module proxy into the
# user's cache directory, so clean clones reuse it.
bindir="${XDG_CACHE_HOME:-$HOME/.cache}/simtel/bin"
if [ ! -x "$bindir/versitygw" ]; then
  echo "installing versitygw v1.8.0 into $bindir (about 2 minutes the first time)" >&2
  mkdir -p "$bindir"
  GOBIN="$bindir" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
echo "versitygw: $bindir/versitygw" >&2
