#!/usr/bin/env bash
# Two builds of the agent side by side: both run at once against one
# broker, each fed by its own `simtel bench agent` at the same rate, and
# their CPU is measured over the same 25 s. On a shared virtual machine
# whose speed drifts by tens of percent from one hour to the next, runs
# one after the other compare the hours as much as the builds; side by
# side, both see the same machine.
#
#   bench/agent-ab.sh BIN_A BIN_B
#
# BIN_A and BIN_B are simtel binaries, or scripts that exec one (to add
# flags or environment: `exec /path/simtel "$@" --max-procs 0`). The
# broker and the generators run the working tree's build.
#
# Knobs (environment): TRANSPORT (http; udp, tcp), RATE (10000 lines/s
# for each agent), BATCH (lines per HTTP POST, 5000; BATCH_B for B's
# generator alone, to compare POST sizes with one build), ROUNDS (3; each
# starts two fresh agents), MEASURE (25 s, after 8 s of load).
#
# Prints per round the ms of CPU a second and the context switches a second
# of each agent (perf stat if it is installed, else the agents' schedstat
# run times and /proc context-switch counts) and the load average. A
# build's position (A or B) is not neutral at the level of a few percent:
# run A/A first to see the spread, and A/B with enough rounds.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin
source "$REPO/bench/lib.sh"
need_args 2 $#
A=$(realpath "$1")
B=$(realpath "$2")
TRANSPORT=${TRANSPORT:-http}
RATE=${RATE:-10000}
BATCH=${BATCH:-5000}
BATCH_B=${BATCH_B:-$BATCH}
ROUNDS=${ROUNDS:-3}
MEASURE=${MEASURE:-25}

build_simtel
WORK=$(mktemp -d -t simtel-agent-ab.XXXXXX)
PEER=$WORK/simtel-peer
cp "$SIMTEL" "$PEER"

BPORT=$(free_port 29292)
"$PEER" broker --data-dir "$WORK/broker" --listen "127.0.0.1:$BPORT" --log-level warn >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
wait_port "$BPORT" "${PIDS[0]}" "$WORK/broker.log"

# cpu_ns PID: the run time of the process's live threads, ns.
cpu_ns() {
	cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'
}
# switches PID: voluntary and involuntary context switches of its live threads.
switches() {
	cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {printf "%d", s}'
}

have_perf=""
if command -v perf >/dev/null && perf stat -e task-clock -- true >/dev/null 2>&1; then
	have_perf=1
fi

for r in $(seq "$ROUNDS"); do
	agents=() gens=() https=() addrs=()
	for i in 0 1; do
		bin=$A
		((i == 1)) && bin=$B
		hp=$(free_port $((28286 + 10 * i)))
		udp="" tcp="" addr=127.0.0.1:$hp
		case $TRANSPORT in
		udp) udp=127.0.0.1:$(free_port $((hp + 1))) addr=$udp ;;
		tcp) tcp=127.0.0.1:$(free_port $((hp + 2))) addr=$tcp ;;
		http) ;;
		*)
			echo "TRANSPORT $TRANSPORT is not http, udp or tcp" >&2
			exit 2
			;;
		esac
		"$bin" agent --brokers "127.0.0.1:$BPORT" --topic "ab$i" --spool-dir "$WORK/spool-$r-$i" \
			--listen-http "127.0.0.1:$hp" --listen-udp "$udp" --listen-tcp "$tcp" --collect-interval -1s \
			--host bench --run bench --log-level warn >"$WORK/agent-$r-$i.log" 2>&1 &
		agents+=($!)
		PIDS+=($!)
		wait_port "$hp" "$!" "$WORK/agent-$r-$i.log"
		https+=("127.0.0.1:$hp")
		addrs+=("$addr")
	done
	for i in 0 1; do
		batch=$BATCH
		((i == 1)) && batch=$BATCH_B
		"$PEER" bench agent --transport "$TRANSPORT" --addr "${addrs[$i]}" --agent-http "${https[$i]}" \
			--agent-pid "${agents[$i]}" --brokers "127.0.0.1:$BPORT" --topic "ab$i" --rate "$RATE" \
			--duration "$((MEASURE + 4))s" --warmup 6s --batch "$batch" --json >"$WORK/gen-$r-$i.json" 2>"$WORK/gen-$r-$i.err" &
		gens+=($!)
	done
	sleep 8
	out=()
	if [[ -n $have_perf ]]; then
		for i in 0 1; do
			perf stat -x, -e task-clock,context-switches -p "${agents[$i]}" -o "$WORK/perf-$r-$i" -- sleep "$MEASURE" &
		done
		wait %% 2>/dev/null || true
		sleep 1
		for i in 0 1; do
			ms=$(awk -F, -v d="$MEASURE" '/task-clock/ {printf "%.2f", $1 / d}' "$WORK/perf-$r-$i")
			cs=$(awk -F, -v d="$MEASURE" '/context-switches/ {printf "%d", $1 / d}' "$WORK/perf-$r-$i")
			out+=("$ms ms/s, $cs cs/s")
		done
	else
		c0=() s0=()
		for i in 0 1; do
			c0+=("$(cpu_ns "${agents[$i]}")")
			s0+=("$(switches "${agents[$i]}")")
		done
		sleep "$MEASURE"
		for i in 0 1; do
			c1=$(cpu_ns "${agents[$i]}")
			s1=$(switches "${agents[$i]}")
			out+=("$(awk -v a="${c0[$i]}" -v b="$c1" -v d="$MEASURE" 'BEGIN {printf "%.2f", (b - a) / 1e6 / d}') ms/s, $(((s1 - s0[i]) / MEASURE)) cs/s")
		done
	fi
	printf 'round %d, %s %s lines/s: A %s | B %s | load %s\n' "$r" "$TRANSPORT" "$RATE" "${out[0]}" "${out[1]}" "$(cut -d' ' -f1 /proc/loadavg)"
	for g in "${gens[@]}"; do
		wait "$g" || echo "generator failed: $(tail -n1 "$WORK"/gen-"$r"-*.err)" >&2
	done
	for p in "${agents[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	PIDS=("${PIDS[0]}")
done
echo "A: $A"
echo "B: $B"
