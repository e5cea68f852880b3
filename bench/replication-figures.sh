#!/usr/bin/env bash
# Measures replicated partitions (raft group per partition) on this machine:
# three `simtel broker` processes on loopback.
#
#  1. Idle CPU: a topic of 300 partitions with replication factor 3 (900
#     replicas, 300 raft groups); utime+stime of each process from
#     /proc/PID/stat over 30 s.
#  2. Write amplification: `simtel bench produce` writes --records records of
#     1 KiB (acks=all, idempotent) to a 6-partition RF 3 topic; bytes the
#     brokers caused to be written to disk (/proc/PID/io write_bytes, all
#     three brokers) divided by the record batch bytes produced
#     (simtel_broker_produced_bytes_total summed over the brokers) times 3
#     replicas; then the same for an RF 1 topic (the non-replicated path:
#     local log fsynced on commit) for comparison. The RF 3 line also gives
#     the broker-wide raft WAL's appends and fsyncs (group commit).
#  3. Throughput and latency, RF 3 against RF 1 in one run: `simtel bench
#     produce` of --tput-records 1 KiB records (acks=all, idempotent, 2
#     producers, 6 partitions) to a new RF 3 topic, then to a new RF 1
#     topic, ROUNDS times alternately; MB/s and p50/p99 produce latency of
#     each, and the RF 3 rate as a fraction of a third of the RF 1 rate (the
#     bound when three brokers share one disk; the target is 0.80). The
#     load average is printed with each figure: on a shared machine only
#     figures taken at a low load mean much.
#  4. Failover (`bench/replication-figures.sh failover`): SIGKILL of a
#     partition leader while three idempotent acks=all franz-go producers
#     (default client settings but for a longer delivery timeout) send,
#     KILLS times (default 20), and the time from each kill to the next
#     acknowledged write on that partition: p50, p99 (nearest rank: the
#     maximum below 100 kills) and max. It runs
#     TestClusterReplicationFailover (real broker processes, and its
#     lost/duplicated/reordered check) with SIMTEL_FAILOVER_KILLS; GAP
#     (default 12s) is the least time between a broker's restart and the
#     next kill. franz-go refreshes metadata at most every 5 s by default
#     (MetadataMinAge), and after a restart it keeps refreshing every 5 s
#     for a while (each refresh first meets a dead connection to the
#     broker's old process); a kill in that time waits for the next
#     refresh, so closer kills measure that wait too (GAP=6s or 1s shows
#     it). LOGS=DIR keeps the broker and producer logs.
#
#  5. One client against NATS JetStream R3 (`bench/replication-figures.sh
#     jetstream`): the way a new user first tries it. ROUNDS (default 3)
#     alternating rounds, `sync` before each step: `simtel bench produce`
#     with one producer and its defaults (idempotent, acks=all, one request
#     in flight per broker) of JS_RECORDS (default 200,000) 1 KiB records
#     to a new 6-partition RF 3 topic, then `nats bench js pub async
#     --replicas=3 --storage=file` of as many 1 KiB messages against three
#     clustered nats-server processes (installed into .bin like
#     bench/compare.sh does), then the same simtel client to a new RF 1
#     topic. Prints each round and the medians: RF 3 over JetStream R3
#     (the issue's target is 2) and RF 3 over a third of RF 1 (target 0.80).
#
#  6. Paced (`bench/replication-figures.sh paced`): ROUNDS (default 3)
#     rounds of one client at its defaults (idempotent, acks=all) to new
#     6-partition topics, each used as soon as Metadata (`simtel topic
#     describe`) names a leader of every partition, with no settling
#     sleep: 20,000 1 KiB records to an RF 1 topic, PACED_RECORDS
#     (default 100,000) to an RF 3 topic as fast as they are
#     acknowledged, then PACED_SECONDS (default 20) to another RF 3 topic
#     at half that rate (or at PACED_RATE records/s). Prints records/s, errors and p50, p99 and max
#     acknowledgement of each. The first round runs on a cluster started
#     5 s before. The max of the first two shows a new topic's first
#     writes: a broker refusing them costs franz-go its 5 s metadata
#     refresh floor (MetadataMinAge), and the records behind them wait.
#
# Usage (1-3 run by default, 4-6 by name):
#   bench/replication-figures.sh             # ports 2409x (Kafka), 2419x (raft), 2429x (gossip), 2439x (http)
#   BASE=2600 RECORDS=100000 bench/replication-figures.sh
#   HEARTBEAT=3s bench/replication-figures.sh   # --replica-heartbeat-timeout
#   SKIP_IDLE=1 TPUT_RECORDS=300000 ROUNDS=3 bench/replication-figures.sh
#   bench/replication-figures.sh failover       # KILLS=20 GAP=12s LOGS=DIR
#   bench/replication-figures.sh jetstream      # ROUNDS=3 JS_RECORDS=200000; NATS ports 2449x (client), 2459x (cluster)
#   bench/replication-figures.sh paced          # ROUNDS=3 PACED_RECORDS=100000 PACED_SECONDS=20
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = failover ]; then
  echo "failover: load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  SIMTEL_FAILOVER_KILLS=${KILLS:-20} SIMTEL_FAILOVER_GAP=${GAP:-12s} SIMTEL_FAILOVER_LOGS=${LOGS:-} \
    go test -count=1 -v -timeout 30m -run '^TestClusterReplicationFailover$' ./broker/ |
    grep -E 'kill [0-9]+:|checker:|live consumer|SIGSTOP|old leader|^(ok|FAIL|---)'
  echo "failover: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
base=${BASE:-2409}
records=${RECORDS:-50000}
tput_records=${TPUT_RECORDS:-200000}
rounds=${ROUNDS:-2}
heartbeat=${HEARTBEAT:-1s}
broker_args=(--replica-heartbeat-timeout "$heartbeat")
source bench/cluster-lib.sh
start_cluster
if [ "${1:-}" = jetstream ]; then
  source bench/jetstream-lib.sh
  jetstream_rounds "${ROUNDS:-3}" "${JS_RECORDS:-200000}"
  exit 0
fi
if [ "${1:-}" = paced ]; then
  # new_topic NAME RF: creates a 6-partition topic and returns once
  # Metadata names a leader of every partition.
  new_topic() {
    "$bin" topic create "$1" --partitions 6 --replication-factor "$2" --brokers "$seeds" >/dev/null
    local deadline=$((SECONDS + 60))
    until "$bin" topic describe "$1" --brokers "$seeds" 2>/dev/null |
      awk '$1 ~ /^[0-9]+$/ && $2 >= 0 {n++} END {exit n != 6}'; do
      [ $SECONDS -ge $deadline ] && { echo "paced: $1 has no leader for every partition after 60 s" >&2; return 1; }
      sleep 0.05
    done
  }
  # one_client TOPIC [ARGS...]: prints records/s, errors and p50 p99 max ms.
  one_client() {
    local t=$1
    shift
    "$bin" bench produce --brokers "$seeds" --topic "$t" --record-size 1024 --producers 1 --partitions 6 --quiet "$@" |
      awk '/records\/s/ {for (i = 2; i <= NF; i++) {if ($i == "records/s,") r = $(i-1); if ($i == "errors" || $i == "errors,") e = $(i-1)}}
        /latency ms/ {for (i = 1; i < NF; i++) {if ($i == "p50") p50 = $(i+1); if ($i == "p99") p99 = $(i+1); if ($i == "max") mx = $(i+1)}}
        END {printf "%d %d %s %s %s\n", r, e, p50, p99, mx}'
  }
  for r in $(seq 1 "${ROUNDS:-3}"); do
    l=$(cut -d' ' -f1 /proc/loadavg)
    new_topic "fresh1-$r" 1
    read -r rate errs p50 p99 mx < <(one_client "fresh1-$r" --records 20000)
    echo "paced round $r: RF 1, new topic: $rate records/s, $errs errors, acknowledgement p50 $p50 ms, p99 $p99 ms, max $mx ms (load average $l)"
    l=$(cut -d' ' -f1 /proc/loadavg)
    new_topic "fast-$r" 3
    read -r rate errs p50 p99 mx < <(one_client "fast-$r" --records "${PACED_RECORDS:-100000}")
    echo "paced round $r: unpaced RF 3, new topic: $rate records/s, $errs errors, acknowledgement p50 $p50 ms, p99 $p99 ms, max $mx ms (load average $l)"
    half=${PACED_RATE:-$((rate / 2))}
    l=$(cut -d' ' -f1 /proc/loadavg)
    new_topic "paced-$r" 3
    read -r prate errs p50 p99 mx < <(one_client "paced-$r" --rate "$half" --duration "${PACED_SECONDS:-20}s")
    echo "paced round $r: RF 3 at $half records/s (half): $prate records/s, $errs errors, acknowledgement p50 $p50 ms, p99 $p99 ms, max $mx ms (target p99 20 ms; load average $l before, $(cut -d' ' -f1 /proc/loadavg) after)"
    "$bin" topic delete "fresh1-$r" "fast-$r" "paced-$r" --brokers "$seeds" >/dev/null || true
  done
  exit 0
fi
if [ -z "${SKIP_IDLE:-}" ]; then
  "$bin" topic create idle --partitions 300 --replication-factor 3 --brokers "$seeds"
  sleep 15 # elections and leader reports
  echo "idle: load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  idle_cpu "300 partitions x RF 3, heartbeat timeout $heartbeat"
  echo "idle: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bin" topic delete idle --brokers "$seeds" >/dev/null || true
fi
load() { awk '{print $1}' /proc/loadavg; }
metric() { # NAME [FACTOR]: sum over the brokers of the value times FACTOR (default 1)
  local s=0 v i
  for i in 0 1 2; do
    v=$(curl -s "http://127.0.0.1:$(hport "$i")/metrics" | awk -v m="$1" -v k="${2:-1}" '$1 == m {printf "%.0f", $2 * k}')
    s=$((s + ${v:-0}))
  done
  echo "$s"
}
metric_ms() { metric "$1" 1000; } # NAME (seconds): sum over the brokers, in ms
wbytes() { awk '/^write_bytes/ {print $2}' "/proc/$1/io"; }
produced() { metric simtel_broker_produced_bytes_total; }
amplification() { # topic, replication factor
  "$bin" topic create "$1" --partitions 6 --replication-factor "$2" --brokers "$seeds"
  sleep 5
  local -a wb
  local i d written=0 p0 p1
  for i in 0 1 2; do wb[$i]=$(wbytes "${pids[$i]}"); done
  local a0 s0 t0
  p0=$(produced)
  a0=$(metric simtel_broker_raft_wal_appends_total)
  s0=$(metric simtel_broker_raft_wal_syncs_total)
  t0=$(metric_ms simtel_broker_raft_wal_sync_seconds_total)
  "$bin" bench produce --brokers "$seeds" --topic "$1" --records "$records" --record-size 1024 --producers 2 --partitions 6 --quiet
  sleep 15 # let snapshots and writeback settle
  p1=$(produced)
  if [ "$2" -gt 1 ]; then
    local syncs=$(($(metric simtel_broker_raft_wal_syncs_total) - s0))
    echo "raft wal RF $2: $(($(metric simtel_broker_raft_wal_appends_total) - a0)) appends in $syncs fsyncs (3 brokers), mean fsync $(echo "scale=2; ($(metric_ms simtel_broker_raft_wal_sync_seconds_total) - t0) / ($syncs + 0.001)" | bc) ms"
  fi
  for i in 0 1 2; do
    d=$(( $(wbytes "${pids[$i]}") - wb[i] ))
    written=$((written + d))
    echo "write RF $2: broker $i wrote $d bytes"
  done
  local prod=$((p1 - p0))
  echo "write amplification RF $2: $written bytes written for $prod bytes produced x $2 replicas = $(echo "scale=2; $written/($prod*$2)" | bc) bytes per byte per replica"
}
amplification wa 3
amplification wa1 1 # the non-replicated path, for comparison

# throughput TOPIC RF: one bench produce run; prints MB/s, p50 and p99 and
# sets tput_mb.
throughput() {
  "$bin" topic create "$1" --partitions 6 --replication-factor "$2" --brokers "$seeds" >/dev/null
  sleep 5
  local out l
  l=$(load)
  out=$("$bin" bench produce --brokers "$seeds" --topic "$1" --records "$tput_records" --record-size 1024 --producers 2 --partitions 6 --quiet)
  tput_mb=$(echo "$out" | awk '{for (i = 2; i <= NF; i++) if ($i == "MB/s,") print $(i-1)}')
  local p50 p99
  p50=$(echo "$out" | awk '/latency/ {for (i = 1; i < NF; i++) if ($i == "p50") print $(i+1)}')
  p99=$(echo "$out" | awk '/latency/ {for (i = 1; i < NF; i++) if ($i == "p99") print $(i+1)}')
  echo "throughput RF $2: $tput_mb MB/s, produce latency p50 $p50 ms, p99 $p99 ms ($tput_records x 1 KiB, acks=all, load average $l before, $(load) after)"
  "$bin" topic delete "$1" --brokers "$seeds" >/dev/null || true
  sleep 5
}
for r in $(seq 1 "$rounds"); do
  throughput "tput3-$r" 3
  rf3=$tput_mb
  throughput "tput1-$r" 1
  rf1=$tput_mb
  echo "throughput round $r: RF 3 $rf3 MB/s = $(echo "scale=2; $rf3 * 3 / $rf1" | bc) of a third of RF 1 ($rf1 MB/s); target 0.80"
done
