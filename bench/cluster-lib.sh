# Shared by cluster-figures.sh and replication-figures.sh: three
# `simtel broker` processes on loopback forming one cluster, their cleanup,
# and the idle-CPU measurement. Source it after setting base (the port
# prefix) and, optionally, broker_args (extra flags for every broker).
#
# Ports: Kafka ${base}N, raft $((base+10))N, gossip $((base+20))N, HTTP $((base+30))N.

kport() { echo "$base$1"; }
rport() { echo "$((base + 10))$1"; }
gport() { echo "$((base + 20))$1"; }
hport() { echo "$((base + 30))$1"; }
work=$(mktemp -d /tmp/simtel-cluster.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
# SIMTEL_BIN=PATH runs that binary instead of building the working tree's.
if [ -n "${SIMTEL_BIN:-}" ]; then
  bin=$(realpath "$SIMTEL_BIN")
else
  go build -o "$work/simtel" ./cmd/simtel
  bin=$work/simtel
fi
seeds="127.0.0.1:$(kport 0),127.0.0.1:$(kport 1),127.0.0.1:$(kport 2)"

# start ID JOIN_GOSSIP_PORT: starts broker ID (joining through the given
# gossip port unless empty) and records its pid in pids[ID].
start() {
  local join=()
  [ -n "$2" ] && join=(--join "127.0.0.1:$2")
  "$bin" broker --node-id "$1" --data-dir "$work/d$1" --listen "127.0.0.1:$(kport "$1")" \
    --raft-listen "127.0.0.1:$(rport "$1")" --gossip-listen "127.0.0.1:$(gport "$1")" \
    --http-listen "127.0.0.1:$(hport "$1")" ${broker_args[@]+"${broker_args[@]}"} "${join[@]}" \
    --bootstrap-expect 3 >>"$work/log$1" 2>&1 &
  pids[$1]=$!
}

# start_cluster: brokers 0, 1 and 2, then a few seconds for the quorum.
start_cluster() {
  start 0 ""
  start 1 "$(gport 0)"
  start 2 "$(gport 0)"
  sleep 5
}

# idle_cpu WHAT: CPU time of each broker over 30 s, in % of one core.
idle_cpu() {
  local hz i d total=0
  local -a before
  hz=$(getconf CLK_TCK)
  for i in 0 1 2; do before[$i]=$(awk '{print $14+$15}' "/proc/${pids[$i]}/stat"); done
  sleep 30
  for i in 0 1 2; do
    d=$(( $(awk '{print $14+$15}' "/proc/${pids[$i]}/stat") - before[i] ))
    total=$((total + d))
    echo "idle: broker $i used $(echo "scale=2; $d*100/$hz/30" | bc)% of a core"
  done
  echo "idle: cluster used $(echo "scale=2; $total*100/$hz/30" | bc)% of a core over 30 s ($1)"
}
