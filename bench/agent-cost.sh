#!/usr/bin/env bash
# The agent's own cost: CPU time and resident memory of `simtel agent` while
# it ingests line protocol at fixed rates, and a check that every line it
# accepted reached the broker.
#
#   1. builds simtel, starts a broker (fresh data directory)
#   2. for each transport (udp, http): starts a fresh agent (fresh spool,
#      node metrics off) and, for each rate (10k, 100k, 1M lines/s), runs
#      `simtel bench agent` against it: WARMUP, then DURATION measured.
#      The generator reads the agent's CPU time and memory from /proc, its
#      counters from /metrics and the topic's end offsets from the broker,
#      and waits for the agent to ship everything before the next step.
#   3. publishes bench/results/agent-cost/<id>.json and the agent results in
#      bench/docs/agent.md.
#
# Takes about 4 minutes with the defaults. Windows of 30 s: with 10 s ones
# every step scattered by ±15% from run to run on a 2-core shared machine.
#
# Knobs (environment): TRANSPORTS ("udp http"; tcp works too), RATES
# ("10000 100000 1000000"), DURATION (30s), WARMUP (2s; FIRST_WARMUP, 6s, for
# the first step of each fresh agent: see bench/docs/agent.md), BATCH (lines per
# HTTP POST, 5000), DATAGRAM_BYTES (8192), SENDERS (HTTP requests in flight,
# 2), PROFILE=1 (CPU profile of the agent for every step, kept in
# bench/results/agent-cost/<id>-<step>.pprof, or the temporary directory with
# NO_PUBLISH), KEEP=1 keeps the temporary directory, NO_PUBLISH=1 leaves
# bench/results and bench/docs/agent.md alone.
#
# AGENT_BIN=PATH measures that simtel binary as the agent instead of the one
# built from the working tree (the broker and the generator still run the
# working tree's): build two revisions and run the script once with each
# for an A/B comparison on the same machine. SIMTEL_BIN=PATH runs that
# binary as the broker and the generator instead of building the working
# tree's; PORT_BASE=N000 picks ports from N000 on (bench/lib.sh).
#
# UDP_RMEM=BYTES raises the kernel's default socket receive buffer
# (net.core.rmem_default, and rmem_max if it is lower) before the UDP agent
# starts, and restores both on exit; it needs root. The agent itself asks for
# a 16 MiB receive buffer (past rmem_max when it runs as root), so this only
# matters for an agent that runs unprivileged. Off by default.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin

TRANSPORTS=${TRANSPORTS:-udp http}
RATES=${RATES:-10000 100000 1000000}
DURATION=${DURATION:-30s}
WARMUP=${WARMUP:-2s}
FIRST_WARMUP=${FIRST_WARMUP:-6s}
BATCH=${BATCH:-5000}
DATAGRAM_BYTES=${DATAGRAM_BYTES:-8192}
SENDERS=${SENDERS:-2}
TOPIC=telemetry

source "$REPO/bench/lib.sh"

# --- processes, sysctl and cleanup -------------------------------------------

RMEM_SAVED=()
cleanup_extra() {
	if (( ${#RMEM_SAVED[@]} == 2 )); then
		sysctl -q -w "net.core.rmem_default=${RMEM_SAVED[0]}" "net.core.rmem_max=${RMEM_SAVED[1]}" || true
		log "restored net.core.rmem_default=${RMEM_SAVED[0]} net.core.rmem_max=${RMEM_SAVED[1]}"
	fi
}

# stop_pid PID: SIGTERM, wait for the exit (the agent ships its spool for up
# to its shutdown timeout), and forget it.
stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for i in "${!PIDS[@]}"; do
		if [[ ${PIDS[$i]} == "$pid" ]]; then
			unset 'PIDS[i]'
		fi
	done
	PIDS=("${PIDS[@]}")
}

# --- build ---------------------------------------------------------------------

build_simtel
WORK=$(mktemp -d -t simtel-agent-cost.XXXXXX)
RUN=$WORK/run.json
ID=$(date -u +%Y-%m-%d-%H%M%S)
# The agent measured is the working tree's: say which, and whether agent/
# had uncommitted changes.
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$REPO" status --porcelain -- agent 2>/dev/null) ]]; then
	REV="$REV with uncommitted changes in agent/"
fi
AGENT_SIMTEL=$SIMTEL
if [[ -n ${AGENT_BIN:-} ]]; then
	AGENT_SIMTEL=$AGENT_BIN
	REV="$AGENT_BIN (AGENT_BIN)"
fi
HOST="$(host_desc), agent at $REV, $(go version | cut -d' ' -f3)"
results_to agent-cost agent.md
mkdir -p "$RESULTS"

# --- broker -----------------------------------------------------------------------

# The broker stands in for one on another machine and the generator for
# the simulation's processes: both run from a copy of the binary (the same
# bytes), so that they share no page cache with the agent. On a compute
# node the agent is the only simtel process, and the pages of the
# executable it keeps resident are its own; sharing them with a broker or
# generator on the same machine would change what the agent can give back
# (see "Memory" in docs/agent-cost.md).
PEER_BIN=$WORK/simtel-peer
cp "$SIMTEL" "$PEER_BIN"
BPORT=$(free_port 29192)
BROKER=127.0.0.1:$BPORT
log "starting simtel broker on $BROKER"
"$PEER_BIN" broker --data-dir "$WORK/broker" --listen "$BROKER" --log-level warn >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
wait_port "$BPORT" "$BROKER_PID" "$WORK/broker.log"
BROKER_CMD="$(show "$PEER_BIN" broker --data-dir "$WORK/broker" --listen "$BROKER" --log-level warn) &"

# --- agent ------------------------------------------------------------------------

AGENT_PID=""
AGENT_CMD=""
# start_agent TRANSPORT: a fresh agent with a fresh spool, listening on the
# transport (and on HTTP for its /metrics), node metrics off.
start_agent() {
	local t=$1 n=$2
	local udp="" tcp=""
	HPORT=$(free_port 28186)
	case $t in
	udp)
		udp=127.0.0.1:$(free_port 28089)
		ADDR=$udp
		;;
	tcp)
		tcp=127.0.0.1:$(free_port $((HPORT + 1)))
		ADDR=$tcp
		;;
	http) ADDR=127.0.0.1:$HPORT ;;
	*)
		echo "transport $t is not udp, tcp or http" >&2
		exit 2
		;;
	esac
	local args=(agent --brokers "$BROKER" --topic "$TOPIC" --spool-dir "$WORK/spool-$t-$n"
		--listen-http "127.0.0.1:$HPORT" --listen-udp "$udp" --listen-tcp "$tcp" --collect-interval -1s
		--host bench --run bench --log-level warn)
	log "starting simtel agent for $t on $ADDR"
	"$AGENT_SIMTEL" "${args[@]}" >"$WORK/agent-$t-$n.log" 2>&1 &
	AGENT_PID=$!
	PIDS+=("$AGENT_PID")
	AGENT_LOG=$WORK/agent-$t-$n.log
	wait_port "$HPORT" "$AGENT_PID" "$AGENT_LOG"
	AGENT_CMD="$(show "$AGENT_SIMTEL" "${args[@]}") &"
}

if [[ -n ${UDP_RMEM:-} ]]; then
	RMEM_SAVED=("$(sysctl -n net.core.rmem_default)" "$(sysctl -n net.core.rmem_max)")
	log "raising net.core.rmem_default to $UDP_RMEM (was ${RMEM_SAVED[0]}; restored on exit)"
	if (( UDP_RMEM > RMEM_SAVED[1] )); then
		sysctl -q -w "net.core.rmem_max=$UDP_RMEM"
	fi
	sysctl -q -w "net.core.rmem_default=$UDP_RMEM"
fi

# --- steps ------------------------------------------------------------------------

NL=$'\n'
# short_rate 100000 → 100k, 1000000 → 1M
short_rate() {
	local r=$1
	if (( r >= 1000000 && r % 1000000 == 0 )); then
		echo "$((r / 1000000))M"
	elif (( r >= 1000 && r % 1000 == 0 )); then
		echo "$((r / 1000))k"
	else
		echo "$r"
	fi
}

FAILED=()
STEP=0
for t in $TRANSPORTS; do
	start_agent "$t" 0
	restarts=0
	warmup=$FIRST_WARMUP # a fresh agent's first step
	for rate in $RATES; do
		STEP=$((STEP + 1))
		label="$t $(short_rate "$rate") lines/s"
		if ! kill -0 "$AGENT_PID" 2>/dev/null; then
			restarts=$((restarts + 1))
			log "the agent is gone; starting another"
			start_agent "$t" "$restarts"
			warmup=$FIRST_WARMUP
		fi
		cmd=("$PEER_BIN" bench agent --transport "$t" --addr "$ADDR" --agent-http "127.0.0.1:$HPORT"
			--agent-pid "$AGENT_PID" --brokers "$BROKER" --topic "$TOPIC" --rate "$rate"
			--duration "$DURATION" --warmup "$warmup" --batch "$BATCH" --datagram-bytes "$DATAGRAM_BYTES"
			--senders "$SENDERS" --json)
		if [[ -n ${PROFILE:-} ]]; then
			cmd+=(--agent-profile "$RESULTS/$ID-$t-$rate.pprof")
		fi
		warmup=$WARMUP
		log "$label: $(show "${cmd[@]}")"
		out=$WORK/step-$STEP.json err=$WORK/step-$STEP.err failed=""
		"${cmd[@]}" 2>&1 >"$out" | tee "$err" >&2 || failed="exit status ${PIPESTATUS[0]}: $(grep -v '^agent ' "$err" | tail -n1)"
		if ! kill -0 "$AGENT_PID" 2>/dev/null; then
			failed="${failed:+$failed; }the agent exited: $(tail -n1 "$AGENT_LOG")"
		fi
		step_failed "$label" "$failed"
		# The profile's path as the README shows it.
		shown_cmd=$(show_rel "${cmd[@]}")
		"$SIMTEL" bench agent-report add --run "$RUN" --label "$label" \
			--command "$BROKER_CMD$NL$AGENT_CMD$NL$shown_cmd" --failed "$failed" --input "$out"
	done
	if kill -0 "$AGENT_PID" 2>/dev/null; then
		stop_pid "$AGENT_PID"
	else
		echo "agent log:" >&2
		tail -n 20 "$AGENT_LOG" >&2
	fi
done

broker_alive "$BROKER_PID" || FAILED+=("broker")

# --- report -----------------------------------------------------------------------

publish_run agent-report agent-cost.sh "TRANSPORTS=\"$TRANSPORTS\" RATES=\"$RATES\" DURATION=$DURATION WARMUP=$WARMUP FIRST_WARMUP=$FIRST_WARMUP BATCH=$BATCH DATAGRAM_BYTES=$DATAGRAM_BYTES SENDERS=$SENDERS${UDP_RMEM:+ UDP_RMEM=$UDP_RMEM}${PROFILE:+ PROFILE=1}"
