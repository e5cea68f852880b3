#!/usr/bin/env bash
# A broker stopped while a topic grows by CATCHUP_MB (default 2000) MB,
# then restarted: how long until it is back in sync, against the time the
# disk needs to write that much, and whether anything was lost.
#
# First the disk: `dd` of CATCHUP_MB MB to the data directory's file
# system with conv=fdatasync (its sequential write rate). Then, for each
# signal of SIGNALS (default "TERM KILL"), on three `simtel broker`
# processes on loopback (bench/cluster-lib.sh):
#
#  1. a new 6-partition RF 3 topic; broker 2 is stopped with that signal;
#  2. `simtel bench produce` writes CATCHUP_MB MB of 1 KiB records
#     (2 idempotent producers, acks=all) through brokers 0 and 1;
#  3. broker 2 is started again with its data directory, and polled
#     every 0.2 s until every partition's replica on it is in sync:
#     simtel_broker_partition_in_sync is 1 on broker 2 (its raft
#     configuration lists it as a voter and it has applied up to the
#     commit index its leader last sent it) and each partition's
#     simtel_broker_partition_high_watermark and
#     simtel_broker_partition_size_bytes on broker 2 equal the leader's;
#     PROFILE=DIR keeps a CPU profile of broker 2 over the first
#     PROFILE_SECONDS (default 30) after the restart, LOGS=DIR the
#     brokers' logs;
#  4. `simtel bench consume` reads the topic back: lost is acknowledged
#     minus read and duplicated is read minus acknowledged, and the sum
#     of the end offsets must equal both (the producers are idempotent
#     and their payloads random, so records are counted, not matched).
#
# It prints the catch-up time from the restart and divided by the disk's
# time for the same bytes, the snapshot installs broker 2 made
# (simtel_broker_replica_snapshot_installs_total), and the load average.
#
#   bench/catchup-figures.sh                         # ports 2409x (Kafka), 2419x, 2429x, 2439x
#   BASE=2800 CATCHUP_MB=200 SIGNALS=KILL bench/catchup-figures.sh
#   SIMTEL_BIN=/tmp/simtel bench/catchup-figures.sh  # a built binary instead of the working tree
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-2409}
mb=${CATCHUP_MB:-2000}
signals=${SIGNALS:-TERM KILL}
timeout=${CATCHUP_TIMEOUT:-1800}
broker_args=()
source bench/cluster-lib.sh
# LOGS=DIR: the brokers' logs are kept whatever ends the run.
trap '[ -n "${LOGS:-}" ] && mkdir -p "$LOGS" && cp "$work"/log? "$LOGS/"; cleanup' EXIT

now() { date +%s.%N; }
since() { echo "scale=1; ($(now) - $1)/1" | bc; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# scrape ID: broker ID's metrics, empty while it does not answer.
scrape() { curl -s --max-time 5 "http://127.0.0.1:$(hport "$1")/metrics" 2>/dev/null || true; }
# pmetric TEXT NAME TOPIC: "PARTITION VALUE" lines of NAME for TOPIC,
# values as integers (/metrics writes large ones with an exponent, which
# sort -n does not read).
pmetric() {
  echo "$1" | awk -v m="$2" -v t="$3" 'index($0, m "{") == 1 && index($0, "topic=\"" t "\"") {
    match($0, /partition="[0-9]+"/); p = substr($0, RSTART + 11, RLENGTH - 12); printf "%s %.0f\n", p, $NF}' | sort -n
}
value() { echo "$1" | awk -v m="$2" '$1 == m {printf "%.0f", $2}'; }

# The disk's sequential write rate where the brokers write.
dd_out=$(dd if=/dev/zero of="$work/dd" bs=1000000 count="$mb" conv=fdatasync 2>&1 | tail -1)
rm -f "$work/dd"
disk_s=$(echo "$dd_out" | awk '{for (i = 1; i < NF; i++) if ($(i+1) == "s,") print $i}')
echo "disk: $mb MB written in $disk_s s with dd conv=fdatasync ($dd_out); load $(load)"

# Another cluster on these ports would answer for broker 2 after its
# restart fails to bind.
for i in 0 1 2; do
  for port in "$(kport "$i")" "$(hport "$i")"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "port $port is in use: choose another BASE" >&2
      exit 1
    fi
  done
done
start_cluster
two="127.0.0.1:$(kport 0),127.0.0.1:$(kport 1)"

for sig in $signals; do
  topic=catchup-$(echo "$sig" | tr 'A-Z' 'a-z')
  for try in $(seq 30); do
    out=$("$bin" topic create "$topic" --partitions 6 --replication-factor 3 --brokers "$seeds" 2>&1) ||
      [[ $out == *TOPIC_ALREADY_EXISTS* ]] && break
    [ "$try" = 30 ] && { echo "$out" >&2; exit 1; }
    sleep 2
  done
  # Every replica on broker 2 must exist and be in sync before it stops.
  until [ "$(pmetric "$(scrape 2)" simtel_broker_partition_high_watermark "$topic" | wc -l)" = 6 ]; do sleep 0.5; done
  sleep 3
  t=$(now)
  kill -0 "${pids[2]}" 2>/dev/null || { echo "$sig: broker 2 is not running (see its log, LOGS=DIR)"; exit 1; }
  kill "-$sig" "${pids[2]}"
  wait "${pids[2]}" 2>/dev/null || true
  echo "$sig: broker 2 stopped in $(since "$t") s; load $(load)"
  records=$((mb * 1000000 / 1024))
  t=$(now)
  out=$("$bin" bench produce --brokers "$two" --topic "$topic" --records "$records" --record-size 1024 \
    --producers 2 --partitions 6 --quiet --stall-timeout 120s --json)
  acked=$(echo "$out" | jq -r .records)
  echo "$sig: produced while broker 2 was down: $acked records acknowledged, $(echo "$out" | jq -r .errors) errors," \
    "$(echo "$out" | jq -r '.mb_per_s') MB/s over $(since "$t") s; load $(load)"
  # The leaders' end of every partition once the writes have ended.
  leader_m=$( { scrape 0; scrape 1; } )
  hw_want=$(pmetric "$leader_m" simtel_broker_partition_high_watermark "$topic" | sort -k1,1n -k2,2nr | awk '!s[$1]++')
  size_want=$(pmetric "$leader_m" simtel_broker_partition_size_bytes "$topic" | sort -k1,1n -k2,2nr | awk '!s[$1]++')
  total=$(echo "$hw_want" | awk '{s += $2} END {print s}')
  bytes=$(echo "$size_want" | awk '{s += $2} END {print s}')
  t=$(now)
  start 2 "$(gport 0)"
  up=""
  while :; do
    kill -0 "${pids[2]}" 2>/dev/null || { echo "$sig: broker 2 exited after its restart (see its log, LOGS=DIR)"; exit 1; }
    m=$(scrape 2)
    [ -z "$up" ] && [ -n "$m" ] && up=$(since "$t")
    [ -n "${PROFILE:-}" ] && [ -n "$m" ] && [ -z "${prof:-}" ] && {
      mkdir -p "$PROFILE"
      curl -s -o "$PROFILE/catchup-$sig.pprof" "http://127.0.0.1:$(hport 2)/debug/pprof/profile?seconds=${PROFILE_SECONDS:-30}" &
      prof=$!
    }
    behind=$(pmetric "$m" simtel_broker_partition_in_sync "$topic" | awk '$2 != 1 {n++} END {print n + 0}')
    if [ -n "$m" ] && [ "$(pmetric "$m" simtel_broker_partition_in_sync "$topic" | wc -l)" = 6 ] && [ "$behind" = 0 ] &&
      [ "$(pmetric "$m" simtel_broker_partition_high_watermark "$topic")" = "$hw_want" ] &&
      [ "$(pmetric "$m" simtel_broker_partition_size_bytes "$topic")" = "$size_want" ]; then
      break
    fi
    if [ "$(echo "$(since "$t") > $timeout" | bc)" = 1 ]; then
      echo "$sig: broker 2 not in sync $timeout s after its restart: $behind partitions not in sync"
      echo "want:"; echo "$hw_want"; echo "has:"; pmetric "$m" simtel_broker_partition_high_watermark "$topic"
      break
    fi
    sleep 0.2
  done
  took=$(since "$t")
  [ -n "${prof:-}" ] && { wait "$prof" || true; unset prof; }
  installs=$(value "$m" simtel_broker_replica_snapshot_installs_total)
  echo "$sig: broker 2 in sync (voter, high watermark and bytes of all 6 partitions equal the leader's) $took s after its restart" \
    "(metrics served after $up s), $bytes bytes in $total records; $took s / disk's $(echo "scale=1; $disk_s * $bytes / ($mb * 1000000)" | bc) s" \
    "for those bytes = $(echo "scale=2; $took * $mb * 1000000 / ($disk_s * $bytes)" | bc); snapshot installs ${installs:-0}; load $(load)"
  # Decoded reads: kgo follows the leaders, which move back to broker 2
  # (its preferred replicas) meanwhile. Listing the partitions' offsets
  # at the start is not retried by the consumer and fails with
  # NOT_LEADER_FOR_PARTITION when it meets such a move: read again then
  # (each try reads the whole topic).
  for try in 1 2 3; do
    got=$("$bin" bench consume --brokers "$seeds" --topic "$topic" --quiet --idle 10s --json | jq -r .records) && break
    got=0
    sleep 5
  done
  echo "$sig: acknowledged $acked, end offsets sum $total, read back $got: lost $((acked - got)), duplicated $((got > acked ? got - acked : 0))"
  "$bin" topic delete "$topic" --brokers "$seeds" >/dev/null || true
  sleep 5
done
