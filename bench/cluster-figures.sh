#!/usr/bin/env bash
# Measures the broker cluster's idle cost and controller failover on this
# machine: three `simtel broker` processes on loopback, one topic of 300
# partitions, CPU time from /proc/PID/stat over 30 s; then three rounds of
# SIGKILL of the controller leader and the time until the next CreateTopics
# through another broker succeeds. Needs kcat (to find the controller).
#
#   bench/cluster-figures.sh            # ports 2909x (Kafka), 2919x (raft), 2929x (gossip), 2939x (HTTP)
#   BASE=3900 bench/cluster-figures.sh  # other ports: 3900x, 3910x, 3920x, 3930x
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE:-2909}
source bench/cluster-lib.sh
start_cluster
"$bin" topic create idle --partitions 300 --replication-factor 1 --brokers "127.0.0.1:$(kport 0)"
sleep 3
idle_cpu "300 partitions, replication factor 1"

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
