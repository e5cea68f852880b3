#!/usr/bin/env bash
# Measures the broker cluster's idle cost and controller failover on this
# machine: three `simtel broker` processes on loopback, one topic of 300
# partitions, CPU time from /proc/PID/stat over 30 s; then three rounds of
# SIGKILL of the controller leader and the time until the next CreateTopics
# through another broker succeeds. Needs kcat (to find the controller).
#
#   bench/cluster-figures.sh            # ports 2909x (Kafka), 2919x (raft), 2929x (gossip)
#   BASE=3900 bench/cluster-figures.sh  # other ports: 3900x, 3910x, 3920x
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-2909}
kport() { echo "$base$1"; }
rport() { echo "$((base + 10))$1"; }
gport() { echo "$((base + 20))$1"; }
work=$(mktemp -d /tmp/simtel-cluster-figures.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/simtel" ./cmd/simtel
bin=$work/simtel

start() { # id, join
  local join=()
  [ -n "$2" ] && join=(--join "127.0.0.1:$2")
  "$bin" broker --node-id "$1" --data-dir "$work/d$1" --listen "127.0.0.1:$(kport "$1")" \
    --raft-listen "127.0.0.1:$(rport "$1")" --gossip-listen "127.0.0.1:$(gport "$1")" \
    "${join[@]}" --bootstrap-expect 3 >>"$work/log$1" 2>&1 &
  pids[$1]=$!
}
start 0 ""
start 1 "$(gport 0)"
start 2 "$(gport 0)"
sleep 5
"$bin" topic create idle --partitions 300 --brokers "127.0.0.1:$(kport 0)"
sleep 3
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
declare -a before
for i in 0 1 2; do before[$i]=$(ticks "${pids[$i]}"); done
sleep 30
total=0
for i in 0 1 2; do
  d=$(( $(ticks "${pids[$i]}") - before[i] ))
  total=$((total + d))
  echo "idle: broker $i used $(echo "scale=2; $d*100/$hz/30" | bc)% of a core"
done
echo "idle: cluster used $(echo "scale=2; $total*100/$hz/30" | bc)% of a core over 30 s (300 partitions)"

seeds="127.0.0.1:$(kport 0),127.0.0.1:$(kport 1),127.0.0.1:$(kport 2)"
for round in 1 2 3; do
  leader=$(kcat -L -b "$seeds" 2>/dev/null | sed -nE 's/.*broker ([0-9]+) at .*\(controller\).*/\1/p')
  other=$(( (leader + 1) % 3 ))
  kill -9 "${pids[$leader]}"
  wait "${pids[$leader]}" 2>/dev/null || true
  s=$(date +%s.%N)
  until "$bin" topic create "failover-$round" --partitions 3 --brokers "127.0.0.1:$(kport $other)" --timeout 3s >/dev/null 2>&1; do :; done
  e=$(date +%s.%N)
  echo "failover round $round: killed controller $leader, next CreateTopics after $(echo "$e - $s" | bc) s"
  start "$leader" "$(gport $other)"
  sleep 12
done
