#!/usr/bin/env bash
# What many replicated partitions cost when idle, and how long a broker
# holding thousands of raft groups takes to start: three `simtel broker`
# processes on loopback, one topic of PARTITIONS partitions with
# replication factor 3 (one raft group per partition, a replica of each on
# every broker).
#
#  1. Create: `simtel topic create` until every partition names a leader
#     in `simtel topic describe`.
#  2. Idle: after SETTLE seconds, utime+stime of each broker from
#     /proc/PID/stat over IDLE seconds (% of one core), its RSS and
#     goroutines, the bytes of its data directory, of its raft WAL and of
#     the controller's raft state (bbolt log + snapshots).
#  3. Hang: SIGSTOP of broker 1 while idle (its sockets stay open, so only
#     the raft timers, or for quiet groups the silence on the heartbeat
#     links, can tell): seconds until broker 0 names another leader for
#     every partition broker 1 led; then SIGCONT.
#  4. Restart after SIGKILL of broker 2, then after a clean stop (SIGTERM)
#     of it: seconds from the start of the new process until it answers
#     Metadata naming a leader for every partition with all of them open
#     ("serving"), and until it leads every partition it is the preferred
#     replica of ("leading": leadership handed back to it).
#  5. Delete: `simtel topic delete` until no broker holds a partition
#     directory of the topic.
#
# The load average is printed beside every figure: other processes on the
# machine show in the CPU figures.
#
#   bench/partitions-figures.sh                       # 300 partitions, ports 2509x-2539x
#   PARTITIONS=3000 BASE=2700 bench/partitions-figures.sh   # ports 2700x-2730x
#   STOP_WAIT=300 bench/partitions-figures.sh         # SIGKILL a clean stop after this many s (default 120)
#   HEARTBEAT=1s IDLE=60 SETTLE=20 SIMTEL_BIN=/tmp/simtel bench/partitions-figures.sh
#   DORMANT=10s bench/partitions-figures.sh           # brokers with --replica-dormant-after 10s
#   PROFILE=DIR bench/partitions-figures.sh           # also 30 s CPU profiles of broker 0 while idle
#                                                     # and of broker 2 from each restart on
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-2509}
parts=${PARTITIONS:-300}
idle=${IDLE:-60}
settle=${SETTLE:-20}
stop_wait=${STOP_WAIT:-120}
broker_args=()
[ -n "${HEARTBEAT:-}" ] && broker_args=(--replica-heartbeat-timeout "$HEARTBEAT")
[ -n "${DORMANT:-}" ] && broker_args+=(--replica-dormant-after "$DORMANT")
source bench/cluster-lib.sh
topic=parts
# The figures are taken by then: no need to wait for clean stops of
# thousands of groups.
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

now() { date +%s.%N; }
since() { echo "scale=1; ($(now) - $1)/1" | bc; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
# leaders PORT [ID]: partitions of the topic whose leader the broker at
# PORT names, and how many of them broker ID (default 2) leads ("N M");
# "0 0" while it cannot answer.
leaders() {
  "$bin" topic describe "$topic" -o json --brokers "127.0.0.1:$1" --timeout 20s 2>/dev/null |
    jq -r --argjson id "${2:-2}" '[.partitions[] | select(.leader >= 0)] | "\(length) \(map(select(.leader == $id)) | length)"' 2>/dev/null ||
    echo "0 0"
}
# preferred PORT ID: partitions of the topic whose first replica (the
# preferred leader) is broker ID, as the broker at PORT describes them.
preferred() {
  "$bin" topic describe "$topic" -o json --brokers "127.0.0.1:$1" --timeout 20s 2>/dev/null |
    jq -r --argjson id "$2" '[.partitions[] | select(.replicas[0] == $id)] | length' 2>/dev/null ||
    echo 0
}
# wait_leaders PORT: until the broker at PORT names a leader for all.
wait_leaders() {
  local n
  while :; do
    read -r n _ < <(leaders "$1")
    [ "$n" -ge "$parts" ] && return
    sleep 1
  done
}

start_cluster
echo "partitions: $parts x RF 3 on 3 brokers; heartbeat timeout ${HEARTBEAT:-default}; dormant after ${DORMANT:-never}; load $(load)"

# The controller may still be electing its first leader.
for try in $(seq 30); do
  t=$(now)
  # TOPIC_ALREADY_EXISTS: an earlier try went through after all.
  out=$("$bin" topic create "$topic" --partitions "$parts" --replication-factor 3 --brokers "$seeds" --timeout 30m 2>&1) ||
    [[ $out == *TOPIC_ALREADY_EXISTS* ]] && break
  [ "$try" = 30 ] && exit 1
  sleep 2
done
created=$(since "$t")
wait_leaders "$(kport 0)"
echo "create: $(since "$t") s until every partition has a leader (CreateTopics returned after $created s); load $(load)"

sleep "$settle"
hz=$(getconf CLK_TCK)
declare -a before
for i in 0 1 2; do before[$i]=$(awk '{print $14+$15}' "/proc/${pids[$i]}/stat"); done
if [ -n "${PROFILE:-}" ]; then
  mkdir -p "$PROFILE"
  curl -s -o "$PROFILE/cpu-$parts.pprof" "http://127.0.0.1:$(hport 0)/debug/pprof/profile?seconds=$((idle < 30 ? idle : 30))" &
  prof=$!
fi
sleep "$idle"
[ -n "${prof:-}" ] && wait "$prof"
# The CPU of all three first: the requests below take seconds with
# thousands of partitions.
declare -a used
for i in 0 1 2; do used[$i]=$(($(awk '{print $14+$15}' "/proc/${pids[$i]}/stat") - before[i])); done
for i in 0 1 2; do
  rss=$(awk '/^VmRSS/ {print int($2/1024)}' "/proc/${pids[$i]}/status")
  gr=$(curl -s -m 120 "http://127.0.0.1:$(hport "$i")/debug/pprof/goroutine?debug=1" | awk 'NR==1 {print $NF}')
  asleep=$(curl -s -m 120 "http://127.0.0.1:$(hport "$i")/metrics" | awk '$1 == "simtel_broker_partitions_dormant" {print $2}')
  echo "idle: broker $i $(echo "scale=2; ${used[$i]}*100/$hz/$idle" | bc)% of a core over $idle s, RSS $rss MiB, $gr goroutines, ${asleep:-0} partitions dormant; load $(load)"
done
for i in 0 1 2; do
  echo "disk: broker $i data $(du -sm "$work/d$i" | cut -f1) MiB, raft WAL $(du -sm "$work/d$i/raft-wal" 2>/dev/null | cut -f1) MiB, controller $(du -sk "$work/d$i/controller" | cut -f1) KiB"
done

# The hang: broker 1 stopped until broker 0 names others as leaders of
# all it led (every partition named, none by broker 1).
read -r _ want < <(leaders "$(kport 0)" 1)
t=$(now)
kill -STOP "${pids[1]}"
while :; do
  read -r n led < <(leaders "$(kport 0)" 1)
  [ "$n" -ge "$parts" ] && [ "$led" = 0 ] && break
  if [ "$(echo "$(since "$t") > 120" | bc)" = 1 ]; then
    echo "hang: broker 1 still named leader of $led partitions 120 s after SIGSTOP"
    break
  fi
  sleep 0.2
done
echo "hang: the $want partitions broker 1 led have other leaders $(since "$t") s after its SIGSTOP; load $(load)"
kill -CONT "${pids[1]}"
sleep "$settle"

# restart HOW: stops broker 2 (kill -HOW), starts it again and times it.
restart() {
  local t n led want before
  read -r _ before < <(leaders "$(kport 0)")
  # Leading again means its preferred leaderships: an earlier step (the
  # hang) may have left it leading others' too.
  want=$(preferred "$(kport 0)" 2)
  t=$(now)
  kill "-$1" "${pids[2]}"
  while kill -0 "${pids[2]}" 2>/dev/null && [ "$(echo "$(since "$t") < $stop_wait" | bc)" = 1 ]; do sleep 0.5; done
  if kill -0 "${pids[2]}" 2>/dev/null; then
    echo "restart ($1): broker 2 had not stopped after $stop_wait s; killed"
    kill -KILL "${pids[2]}"
  fi
  wait "${pids[2]}" 2>/dev/null || true
  echo "restart ($1): broker 2 led $before partitions ($want as preferred replica); it stopped in $(since "$t") s"
  start 2 "$(gport 0)"
  t=$(now)
  if [ -n "${PROFILE:-}" ]; then
    (until curl -s -o "$PROFILE/restart-$1-$parts.pprof" --fail "http://127.0.0.1:$(hport 2)/debug/pprof/profile?seconds=30"; do sleep 0.2; done) &
  fi
  while :; do
    read -r n _ < <(leaders "$(kport 2)")
    [ "$n" -ge "$parts" ] && [ "$(grep -c "topic opened from the controller.*topic=$topic" "$work/log2")" -ge "$2" ] && break
    sleep 0.5
  done
  echo "restart ($1): serving after $(since "$t") s (every partition open and led); load $(load)"
  while :; do
    read -r _ led < <(leaders "$(kport 0)")
    [ "$led" -ge "$want" ] && break
    if [ "$(echo "$(since "$t") > 300" | bc)" = 1 ]; then
      echo "restart ($1): broker 2 leads only $led of $want partitions after 300 s"
      return
    fi
    sleep 1
  done
  echo "restart ($1): leading $led partitions again after $(since "$t") s; load $(load)"
}
restart KILL 2
sleep "$settle"
restart TERM 3
rss=$(awk '/^VmRSS/ {print int($2/1024)}' "/proc/${pids[2]}/status")
echo "restart: broker 2 RSS $rss MiB after the restarts"

t=$(now)
"$bin" topic delete "$topic" --brokers "$seeds" --timeout 30m >/dev/null
while [ -n "$(ls -d "$work"/d*/data/"$topic"-* 2>/dev/null | head -1)" ]; do sleep 0.5; done
echo "delete: $(since "$t") s until no broker holds a partition of it; load $(load)"
