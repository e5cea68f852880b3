#!/usr/bin/env bash
# Policy fan-out with nodes on links of their own: a broker and NODES agents,
# each in a network namespace of its own whose one link (a veth pair into a
# bridge of the root namespace) is rate-limited with tc tbf at RATE in both
# directions. `simtel bench fanout --mode agents` runs in the root namespace:
# it publishes SIZE bytes over the broker's link (as a learner elsewhere
# would), long-polls every agent's GET /v1/policy/<name> until it holds the
# version, and reads the links' byte counters (/sys/class/net of the root
# ends) and the agents' and broker's /metrics before and after.
#
# Steps (MODES, in order; each starts NODES fresh agents following a policy
# of its own, and stops them after):
#   baseline     agents fetch from the broker only: one copy per node
#   relay        agents relay chunks to each other (--policy-relay-listen,
#                --policy-relay-key); skipped, with the reason, when the
#                simtel built has no such flag
#   delta        a version of SIZE random bytes, then a copy with DELTA of
#                its bytes changed published as a delta against it; what
#                each node's link carried for the delta is the figure
#   delta-relay  the delta with relaying agents
# Every version is format 2 (chunks listed by hash), so the steps differ only
# in what they name.
#
# Needs root (ip netns, veth, a bridge, tc tbf); refuses otherwise. Cleans up
# on exit: the processes it started, then the namespaces, veths and bridge
# it made (all named sf<tag>…, tag from this shell's pid).
#
# Knobs (environment): NODES (32), SIZE (64MiB), RATE (1gbit, tc's units),
# BURST (tbf bucket, 256kb), MODES ("baseline relay delta delta-relay"),
# DELTA (0.03), NET (first two octets of the /16 used, default
# 10.<200 + pid % 50>), PORT_BASE (24000: the broker on +92 and +644, the
# agents' HTTP on +186, gossip on +946, relay on +947, inside their
# namespaces), OUT (directory for one JSON result per step and table.md;
# default the temporary directory), SIMTEL_BIN (a built simtel instead of
# building the working tree), TIMEOUT (per step, for the warm-up and for the
# measured version, 5m), KEEP=1 keeps the
# temporary directory, POLICY_ROOT (/dev/shm: the agents' policy
# directories, on tmpfs like the agent's default --policy-dir, so that
# installing a version syncs no disk; each step's are removed after it).
#
# Prints one Markdown table of the steps at the end (also OUT/table.md);
# exits 1 if a step failed (an agent that never held the version, the
# bench's error), not for a missed target.
set -euo pipefail

if [[ $(id -u) != 0 ]]; then
	echo "fanout-netns.sh: needs root to make network namespaces, veth pairs and tc qdiscs (try: sudo $0)" >&2
	exit 2
fi
for tool in ip tc jq; do
	if ! command -v "$tool" >/dev/null; then
		echo "fanout-netns.sh: $tool is missing (iproute2 for ip and tc; jq for the table)" >&2
		exit 2
	fi
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin

NODES=${NODES:-32}
SIZE=${SIZE:-64MiB}
RATE=${RATE:-1gbit}
BURST=${BURST:-256kb}
MODES=${MODES:-baseline relay delta delta-relay}
DELTA=${DELTA:-0.03}
NET=${NET:-10.$((200 + $$ % 50))}
PORT_BASE=${PORT_BASE:-24000}
TIMEOUT=${TIMEOUT:-5m}
TAG=sf$(printf '%04x' $(($$ % 65536)))

source "$REPO/bench/lib.sh"

BRIDGE=${TAG}br
NSLIST=() # namespaces made, deleted on exit
LINKS=()  # root ends of veth pairs made

cleanup_extra() {
	local ns l
	[[ -n ${PDIR:-} ]] && rm -rf "$PDIR"
	for l in "${LINKS[@]}"; do
		ip link del "$l" 2>/dev/null || true
	done
	for ns in "${NSLIST[@]}"; do
		ip netns del "$ns" 2>/dev/null || true
	done
	ip link del "$BRIDGE" 2>/dev/null || true
}

# limit DEV [NS]: rate-limit what DEV sends (in namespace NS if given).
limit() {
	local dev=$1 ns=${2:-}
	tc ${ns:+-n "$ns"} qdisc add dev "$dev" root tbf rate "$RATE" burst "$BURST" latency 50ms
}

# node_ns NAME ADDR: a namespace NAME whose eth0 has ADDR/16, linked to the
# bridge by a veth whose root end is also called NAME; both ends limited.
node_ns() {
	local name=$1 addr=$2
	ip netns add "$name"
	NSLIST+=("$name")
	ip link add "$name" type veth peer name eth0 netns "$name"
	LINKS+=("$name")
	ip link set "$name" master "$BRIDGE" up
	ip -n "$name" link set lo up
	ip -n "$name" addr add "$addr/16" dev eth0
	ip -n "$name" link set eth0 up
	limit "$name"
	limit eth0 "$name"
}

# --- setup ---------------------------------------------------------------------

HOST=$(host_desc)
build_simtel
WORK=$(mktemp -d -t simtel-fanout-netns.XXXXXX)
OUT=${OUT:-$WORK}
mkdir -p "$OUT"
PDIR=$(mktemp -d -p "${POLICY_ROOT:-/dev/shm}" simtel-fanout-netns.XXXXXX)

log "bridge $BRIDGE ($NET.0.1/16), broker and $NODES node namespaces, links at $RATE (tbf burst $BURST)"
ip link add "$BRIDGE" type bridge
ip addr add "$NET.0.1/16" dev "$BRIDGE"
ip link set "$BRIDGE" up
BNS=${TAG}b
BADDR=$NET.0.2
node_ns "$BNS" "$BADDR"
NODE_NS=()
NODE_ADDR=()
for i in $(seq 0 $((NODES - 1))); do
	ns=${TAG}n$i
	addr=$NET.$((1 + i / 250)).$((1 + i % 250))
	node_ns "$ns" "$addr"
	NODE_NS+=("$ns")
	NODE_ADDR+=("$addr")
done

BPORT=$((PORT_BASE + 92))
HPORT=$((PORT_BASE + 644))
APORT=$((PORT_BASE + 186))
GPORT=$((PORT_BASE + 946))
RPORT=$((PORT_BASE + 947))
log "starting simtel broker in $BNS on $BADDR:$BPORT"
ip netns exec "$BNS" "$SIMTEL" broker --data-dir "$WORK/broker" --listen "$BADDR:$BPORT" \
	--http-listen "$BADDR:$HPORT" --log-level warn >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
wait_tcp "$BADDR" "$BPORT" "$BROKER_PID" "$WORK/broker.log" 30
wait_tcp "$BADDR" "$HPORT" "$BROKER_PID" "$WORK/broker.log" 30

RELAY_FLAG=""
if "$SIMTEL" agent --help 2>&1 | grep -q -- --policy-relay-listen; then
	RELAY_FLAG=1
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/relay.key"
fi

# --- steps ---------------------------------------------------------------------

AGENT_PIDS=()
# start_agents POLICY RELAY: one agent per node namespace following POLICY,
# relaying when RELAY is set; returns when every HTTP listener is up.
start_agents() {
	local policy=$1 relay=$2 i dir args
	AGENT_PIDS=()
	for i in "${!NODE_NS[@]}"; do
		dir=$WORK/$policy/node$i
		mkdir -p "$dir"
		args=(agent --brokers "$BADDR:$BPORT" --policies "$policy" --policy-dir "$PDIR/$policy/node$i"
			--spool-dir "$dir/spool" --listen-udp "" --listen-tcp "" --listen-http "${NODE_ADDR[$i]}:$APORT"
			--host "node$i" --run "$policy" --log-level warn
			--gossip-listen "${NODE_ADDR[$i]}:$GPORT" --gossip-join "${NODE_ADDR[0]}:$GPORT")
		if [[ -n $relay ]]; then
			args+=(--policy-relay-listen "${NODE_ADDR[$i]}:$RPORT" --policy-relay-key "$WORK/relay.key")
		fi
		ip netns exec "${NODE_NS[$i]}" "$SIMTEL" "${args[@]}" >"$dir/agent.log" 2>&1 &
		AGENT_PIDS+=($!)
		PIDS+=($!)
	done
	for i in "${!NODE_NS[@]}"; do
		wait_tcp "${NODE_ADDR[$i]}" "$APORT" "${AGENT_PIDS[$i]}" "$WORK/$policy/node$i/agent.log" 30
	done
}

stop_agents() {
	local pid
	for pid in "${AGENT_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${AGENT_PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	AGENT_PIDS=()
}

AGENTS=$(printf "http://%s:$APORT," "${NODE_ADDR[@]}")
AGENTS=${AGENTS%,}
AGENT_LINKS=$(printf '%s,' "${NODE_NS[@]}")
AGENT_LINKS=${AGENT_LINKS%,}
FAILED=()
SKIPPED=()
STEP=0
for mode in $MODES; do
	relay="" extra=()
	case $mode in
	baseline) ;;
	relay) relay=1 ;;
	delta) extra=(--delta "$DELTA") ;;
	delta-relay) relay=1 extra=(--delta "$DELTA") ;;
	*)
		echo "fanout-netns.sh: unknown mode $mode in MODES (baseline, relay, delta, delta-relay)" >&2
		exit 2
		;;
	esac
	if [[ -n $relay && -z $RELAY_FLAG ]]; then
		SKIPPED+=("$mode: this simtel's agent has no --policy-relay-listen")
		log "skipping $mode: this simtel's agent has no --policy-relay-listen"
		continue
	fi
	STEP=$((STEP + 1))
	policy=netns-$STEP-$mode
	log "$mode: starting $NODES agents following $policy"
	start_agents "$policy" "$relay"
	cmd=("$SIMTEL" bench fanout --brokers "$BADDR:$BPORT" --broker-metrics "http://$BADDR:$HPORT/metrics"
		--broker-pid "$BROKER_PID" --mode agents --format 2 --size "$SIZE" --policy "$policy"
		--agents "$AGENTS" --agent-links "$AGENT_LINKS" --broker-link "$BNS" --link-rate "$RATE"
		--setup-timeout "$TIMEOUT" --timeout "$TIMEOUT" --log-level warn --json "${extra[@]}")
	log "$mode: $(show_rel "${cmd[@]}")"
	out=$OUT/step-$STEP-$mode.json
	if ! "${cmd[@]}" >"$out" 2>"$WORK/step-$STEP.err"; then
		step_failed "$mode" "$(tail -n1 "$WORK/step-$STEP.err")"
	fi
	stop_agents
	rm -rf "${PDIR:?}/$policy"
	broker_alive "$BROKER_PID" || FAILED+=("broker")
done

# --- report --------------------------------------------------------------------

{
	REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
	echo "$HOST, code at $REV, by \`NODES=$NODES SIZE=$SIZE RATE=$RATE BURST=$BURST DELTA=$DELTA bench/fanout-netns.sh\`; load at the end $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "| step | nodes | version | publish | broker egress (link) | per node in, mean / max | nodes out, all / busiest | last node (from publish end) | × size÷rate | CPU floor / links floor | bound | machine busy |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"
	for f in "$OUT"/step-*.json; do
		[[ -s $f ]] && jq -e .links "$f" >/dev/null || continue
		mode=$(basename "$f" .json)
		mode=${mode#step-*-}
		jq -r --arg mode "$mode" '
			def mb: . / 1e6 | (. * 10 | round / 10) | tostring + " MB";
			def r(n): . * pow(10; n) | round / pow(10; n) | tostring;
			(.settings.size) as $s |
			"| \($mode) | \(.held)/\(.settings.nodes) | \($s / 1048576 | r(0)) MiB" +
			(if .delta then " (delta \(.settings.delta * 100 | r(1))%)" else "" end) +
			" | \(.publish_s | r(2)) s" +
			" | \(.links.broker_out_bytes | mb) (\(.net_targets.egress_over_size | r(2))×)" +
			" | \(.links.node_in_bytes_mean | mb) / \(.links.node_in_bytes_max | mb) (\(.links.node_in_bytes_max / $s * 100 | r(1))%)" +
			" | \(.links.node_out_bytes_total // 0 | mb) / \(.links.node_out_bytes_max // 0 | mb)" +
			" | \(.from_publish_start.max_s | r(2)) s (\(.from_publish_return.max_s | r(2)) s)" +
			" | \(.net_targets.last_over_link_limit | r(1))×" +
			" | \(.net_targets.cpu_floor_s | r(2)) s / \(.net_targets.links_floor_s | r(2)) s" +
			" | \(.net_targets.bound) | \(.machine_busy_pct | r(0))% |"' "$f"
	done
} >"$OUT/table.md"
log "results ($NODES nodes, $SIZE, links at $RATE; JSON in $OUT)"
cat "$OUT/table.md"
for s in "${SKIPPED[@]}"; do
	echo "skipped: $s"
done
exit_if_failed
