#!/usr/bin/env bash
# Runs franz-go's own integration suite (pkg/kgo of github.com/twmb/franz-go
# v1.22.3, from the Go module proxy) against fresh `simtel broker`
# processes, and prints which tests passed, failed and were skipped.
#
#   scripts/kgo-suite.sh                       # one broker, KGO_TEST_RF=1
#   KGO_SUITE_BROKERS=3 scripts/kgo-suite.sh   # a 3-broker cluster, KGO_TEST_RF=3
#   scripts/kgo-suite.sh -run TestGroupETL     # extra args go to `go test`
#
# KGO_SUITE_BROKERS (1 or 3, default 1) picks a single-node broker or a
# cluster of three on loopback (cluster mode: --raft-listen, gossip,
# --bootstrap-expect 3), all three passed as seeds. KGO_SUITE_PORT (default
# 19092) is the first Kafka port; a cluster also uses the next two, and
# +100 and +200 for raft and gossip. KGO_TEST_RECORDS (default here
# 100000) sets how many records the long tests produce. Every test runs on
# both, including the transactional ones (TestTxnEtl).
# Exit status is go test's (1 also when a broker died during the suite).
# SASL: every broker also has a SASL_PLAINTEXT listener on port +400
# offering SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER in the unsecured
# test mode; the script creates the SCRAM user kgo (simtel user add) and
# passes KGO_TEST_SCRAM=kgo:...:512, KGO_TEST_SCRAM_SEEDS and
# KGO_TEST_OAUTH_SEEDS, so TestSCRAMAuth, TestSCRAMAuthBadCredentials and
# TestOAuthAuth run instead of being skipped (KGO_SUITE_SASL=0: no SASL).
# TLS (KGO_SUITE_TLS=1): a secured cluster as a site would run it. The
# suite's listener is SSL with required client certificates
# (--tls-client-auth required) and the suite runs with
# KGO_TEST_TLS=ca:..,cert:..,key:.. (client certificate CN admin); the CA
# and certificates are made with openssl. The brokers run --authorizer acl
# with --superusers User:admin,User:broker: the suite's principal is its
# certificate's CN (the default principal mapping), and OAUTHBEARER's
# test token names sub admin, the same principal. The SCRAM user kgo gets
# no ACL and is no superuser: TestSCRAMAuth only pings and asks Metadata,
# which the authorizer answers with the brokers and no topics (the script
# checks that kgo is refused `simtel acl list`, so a run whose authorizer
# is off fails). There is no PLAINTEXT listener: `simtel user add` and
# that check connect over SSL and SASL like any client. On 3 brokers
# gossip is encrypted with a shared key (--gossip-key-file), and with
# KGO_SUITE_CLUSTER_TLS=1 (the default) the brokers talk to each other as
# a site's would: raft and their Kafka client over mutual TLS
# (--cluster-tls, the broker certificate, CN broker, serving both ends),
# the inter-broker listener being the suite's SSL one, where the brokers'
# principal is User:broker, a superuser (the transaction markers they send
# each other need ClusterAction). Raft between two brokers is one TLS
# connection per direction whatever the number of partitions
# (broker/cluster/session.go), so leader moves cost no handshakes.
# KGO_SUITE_CLUSTER_TLS=0 keeps raft in clear, the brokers dialing a
# PLAINTEXT listener on 127.0.0.1 (port +500) as User:ANONYMOUS with an ACL
# allowing it ClusterAction from host 127.0.0.1.
# TestIssue769 is skipped with TLS: it dials through a Dialer of its own,
# which franz-go refuses beside a TLS config. TestDecompressPools is
# always skipped: it sends no request to a broker, and it can hang: it
# takes a zstd decoder out of the client's pool and decodes with it
# without keeping the pool's wrapper alive, so a collection in between
# runs the wrapper's finalizer, which closes the decoder under the
# decode (a CI run hung there for 14 minutes). The client's own decode
# path keeps the wrapper until it is done.
# KGO_SUITE_LOG_LEVEL (default warn) is the brokers' --log-level;
# KGO_SUITE_KEEP=1 keeps the work directory (broker logs, suite output).
set -euo pipefail
cd "$(dirname "$0")/.."
version=v1.22.3
brokers=${KGO_SUITE_BROKERS:-1}
port=${KGO_SUITE_PORT:-19092}
tls=${KGO_SUITE_TLS:-0}
cluster_tls=${KGO_SUITE_CLUSTER_TLS:-1}
case "$brokers" in
  1|3) ;;
  *) echo "KGO_SUITE_BROKERS must be 1 or 3, not $brokers" >&2; exit 2 ;;
esac
work=$(mktemp -d /tmp/simtel-kgo-suite.XXXXXX)
pids=()
cleanup() {
  # A broker that has not stopped 30 s after SIGTERM is killed (and
  # said so: a hung shutdown is a bug).
  running() { [ -r "/proc/$1/status" ] && ! grep -qs '^State:[[:space:]]*Z' "/proc/$1/status"; }
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for i in "${!pids[@]}"; do
    for _ in $(seq 300); do running "${pids[$i]}" || break; sleep 0.1; done
    if running "${pids[$i]}"; then
      # SIGQUIT makes the Go runtime write every goroutine to the log:
      # what the stop waits for.
      kill -QUIT "${pids[$i]}" 2>/dev/null || true
      for _ in $(seq 50); do running "${pids[$i]}" || break; sleep 0.1; done
      kill -9 "${pids[$i]}" 2>/dev/null || true
      {
        echo "broker $i did not stop within 30s of SIGTERM; killed. The end of its log, with its goroutines:"
        tail -n 3000 "$work/broker$i.log"
      } >&2
    fi
    wait "${pids[$i]}" 2>/dev/null || true
  done
  if [ "${KGO_SUITE_KEEP:-0}" = 1 ]; then
    echo "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

go build -o "$work/simtel" ./cmd/simtel
go mod download github.com/twmb/franz-go@$version
src=$(go env GOMODCACHE)/github.com/twmb/franz-go@$version
cp -r "$src" "$work/franz-go"
chmod -R u+w "$work/franz-go"

wait_port() {
  for _ in $(seq 200); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listening on 127.0.0.1:$1 after 20s" >&2
  return 1
}

# SASL listeners (see the header): sasl_listener I is broker I's entry
# of --listeners, sasl_args its SASL flags.
sasl=${KGO_SUITE_SASL:-1}
sasl_args=()
sasl_listener() { :; }
if [ "$sasl" = 1 ]; then
  sasl_args=(--sasl-mechanisms SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER --sasl-oauthbearer-unsecured)
  sasl_listener() { printf ',sasl=SASL_PLAINTEXT://127.0.0.1:%d' $((port + 400 + $1)); }
fi

# The suite's listener (see the header): suite_listener I PORT is broker
# I's first entries of --listeners, tls_args the TLS and authorizer flags
# (cluster_args those of a cluster), admin_sec the security flags of
# simtel's own commands.
tls_args=()
cluster_args=()
tls_env=()
tls_skip=(-skip '^TestDecompressPools$')
admin_sec=()
suite_listener() { printf 'local=PLAINTEXT://127.0.0.1:%d' "$2"; }
if [ "$tls" = 1 ]; then
  command -v openssl >/dev/null || { echo "KGO_SUITE_TLS=1 needs openssl" >&2; exit 2; }
  mkdir "$work/tls"
  (
    cd "$work/tls"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -keyout ca-key.pem -out ca.pem -days 2 -subj "/CN=simtel kgo-suite CA" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    # The broker certificate serves clients and, with cluster TLS, is
    # also the brokers' client certificate to each other.
    for who in broker:serverAuth,clientAuth:subjectAltName=IP:127.0.0.1,DNS:localhost admin:clientAuth:; do
      IFS=: read -r cn eku san <<<"$who"
      openssl req "${ec[@]}" -keyout "$cn-key.pem" -out "$cn.csr" -subj "/CN=$cn" 2>/dev/null
      ext="extendedKeyUsage=$eku"
      [ -n "$san" ] && ext="$ext"$'\n'"$san"
      openssl x509 -req -in "$cn.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
        -out "$cn.pem" -extfile <(echo "$ext") 2>/dev/null
    done
    head -c 32 /dev/urandom | base64 >gossip.key
  )
  tls_args=(--tls-cert "$work/tls/broker.pem" --tls-key "$work/tls/broker-key.pem"
    --tls-ca "$work/tls/ca.pem" --tls-client-auth required
    --authorizer acl --superusers User:admin,User:broker)
  cluster_args=(--gossip-key-file "$work/tls/gossip.key")
  tls_skip=(-skip '^(TestIssue769|TestDecompressPools)$')
  tls_env=(KGO_TEST_TLS="ca:$work/tls/ca.pem,cert:$work/tls/admin.pem,key:$work/tls/admin-key.pem")
  admin_sec=(--security-protocol SSL --tls-ca "$work/tls/ca.pem" --tls-cert "$work/tls/admin.pem" --tls-key "$work/tls/admin-key.pem")
  suite_listener() { printf 'suite=SSL://127.0.0.1:%d' "$2"; }
  if [ "$brokers" = 3 ] && [ "$cluster_tls" = 1 ]; then
    cluster_args+=(--cluster-tls --inter-broker-listener suite)
  elif [ "$brokers" = 3 ]; then
    suite_listener() { printf 'suite=SSL://127.0.0.1:%d,internal=PLAINTEXT://127.0.0.1:%d' "$2" $((port + 500 + $1)); }
  fi
fi

seeds=()
if [ "$brokers" = 1 ]; then
  "$work/simtel" broker --node-id 0 --data-dir "$work/data0" \
    --listeners "$(suite_listener 0 $port)$(sasl_listener 0)" "${sasl_args[@]}" "${tls_args[@]}" \
    --group-initial-rebalance-delay 0s --log-level "${KGO_SUITE_LOG_LEVEL:-warn}" 2>"$work/broker0.log" &
  pids+=($!)
  wait_port "$port"
  seeds=(127.0.0.1:$port)
  rf=1
else
  for i in 0 1 2; do
    kafka=$((port + i)) raft=$((port + 100 + i)) gossip=$((port + 200 + i)) http=$((port + 300 + i))
    join=()
    [ "$i" -gt 0 ] && join=(--join 127.0.0.1:$((port + 200)))
    "$work/simtel" broker --node-id $i --data-dir "$work/data$i" \
      --listeners "$(suite_listener $i $kafka)$(sasl_listener $i)" "${sasl_args[@]}" "${tls_args[@]}" \
      --raft-listen 127.0.0.1:$raft --gossip-listen 127.0.0.1:$gossip --http-listen 127.0.0.1:$http \
      "${cluster_args[@]}" "${join[@]}" --bootstrap-expect 3 \
      --group-initial-rebalance-delay 0s --log-level "${KGO_SUITE_LOG_LEVEL:-warn}" 2>"$work/broker$i.log" &
    pids+=($!)
    seeds+=(127.0.0.1:$kafka)
  done
  for i in 0 1 2; do wait_port $((port + i)); done
  # Ready: every broker sees the three, and holds its replicas of the
  # 6 partitions of __consumer_offsets (created by the controller once
  # the three are alive).
  ready=0
  for _ in $(seq 600); do
    ready=1
    for i in 0 1 2; do
      m=$(curl -fsS "http://127.0.0.1:$((port + 300 + i))/metrics" 2>/dev/null || true)
      grep -q '^simtel_broker_cluster_alive_brokers 3$' <<<"$m" || ready=0
      [ "$(grep -c '^simtel_broker_partition_high_watermark{partition="[0-9]*",topic="__consumer_offsets"}' <<<"$m")" = 6 ] || ready=0
    done
    [ $ready = 1 ] && break
    sleep 0.1
  done
  if [ $ready != 1 ]; then
    echo "the 3-broker cluster did not form within 60s" >&2
    for i in 0 1 2; do echo "--- broker $i log (tail) ---"; tail -n 20 "$work/broker$i.log"; done
    exit 1
  fi
  rf=3
fi
IFS=, seedlist="${seeds[*]}"
unset IFS
if [ "$tls" = 1 ] && [ "$brokers" = 3 ] && [ "$cluster_tls" != 1 ]; then
  # The brokers' own requests to each other (see the header).
  if ! "$work/simtel" acl add --brokers "$seedlist" "${admin_sec[@]}" --allow --principal User:ANONYMOUS \
      --host 127.0.0.1 --operation cluster-action --cluster >"$work/acl-add.log" 2>&1; then
    echo "cannot allow the brokers' principal ClusterAction:" >&2
    cat "$work/acl-add.log" >&2
    exit 1
  fi
fi

sasl_env=()
if [ "$sasl" = 1 ]; then
  sasl_seeds=127.0.0.1:$((port + 400))
  for i in $(seq 1 $((brokers - 1))); do sasl_seeds+=,127.0.0.1:$((port + 400 + i)); done
  sasl_env=(KGO_TEST_SCRAM_SEEDS=$sasl_seeds KGO_TEST_OAUTH_SEEDS=$sasl_seeds)
  echo kgo-suite-secret >"$work/kgo.password"
  if "$work/simtel" user add kgo --brokers "$seedlist" "${admin_sec[@]}" --mechanism SCRAM-SHA-512 \
      --password-file "$work/kgo.password" >"$work/user-add.log" 2>&1; then
    sasl_env+=(KGO_TEST_SCRAM=kgo:kgo-suite-secret:512)
  else
    echo "cannot create the SCRAM user kgo, TestSCRAMAuth will skip:" >&2
    cat "$work/user-add.log" >&2
  fi
  if [ "$tls" = 1 ]; then
    # Retried while a broker has not applied the new user yet.
    for _ in $(seq 60); do
      "$work/simtel" acl list --brokers "$sasl_seeds" --security-protocol SASL_PLAINTEXT \
        --sasl-mechanism SCRAM-SHA-512 --sasl-username kgo --sasl-password-file "$work/kgo.password" \
        >"$work/acl-check.log" 2>&1 || true
      grep -q SASL_AUTHENTICATION_FAILED "$work/acl-check.log" || break
      sleep 0.5
    done
    if ! grep -q CLUSTER_AUTHORIZATION_FAILED "$work/acl-check.log"; then
      echo "simtel acl list as the SCRAM user kgo was not refused with CLUSTER_AUTHORIZATION_FAILED (is the acl authorizer on?):" >&2
      cat "$work/acl-check.log" >&2
      exit 1
    fi
  fi
fi

status=0
start=$(date +%s)
( cd "$work/franz-go/pkg/kgo" && \
  env "${sasl_env[@]}" "${tls_env[@]}" KGO_SEEDS=$seedlist KGO_TEST_RF=$rf KGO_TEST_RECORDS=${KGO_TEST_RECORDS:-100000} \
  go test -count=1 -timeout 15m -v . "${tls_skip[@]}" "$@" ) >"$work/suite.log" 2>&1 || status=$?
elapsed=$(( $(date +%s) - start ))

grep -E '^(=== RUN|--- (PASS|FAIL|SKIP)|PASS|FAIL|ok )' "$work/suite.log" | grep -v '=== RUN' | sed 's/^/  /' || true
left_out=", TestDecompressPools left out (see the header)"
[ "$tls" = 1 ] && left_out=", TestIssue769 and TestDecompressPools left out (see the header)"
echo "summary ($brokers broker(s), KGO_TEST_RF=$rf, TLS=$tls, ${elapsed}s): $(grep -c -- '^--- PASS' "$work/suite.log" || true) passed, $(grep -c -- '^--- FAIL' "$work/suite.log" || true) failed, $(grep -c -- '^--- SKIP' "$work/suite.log" || true) skipped (top-level and subtests)$left_out"
if [ $status -ne 0 ]; then
  echo "--- why tests failed ---"
  grep -E '^\s+[A-Za-z0-9_]+_test\.go:[0-9]+: ' "$work/suite.log" |
    grep -Ev 'deleting (topic|group)|completed in|does not support|not set, skipping' | tail -n 40 || true
  echo "--- suite output (tail) ---"; tail -n 80 "$work/suite.log"
  for i in "${!pids[@]}"; do echo "--- broker $i log (tail) ---"; tail -n 40 "$work/broker$i.log"; done
fi
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    echo "broker $i died during the suite:"; tail -n 40 "$work/broker$i.log"; status=1
  fi
done
exit $status
