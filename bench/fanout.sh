#!/usr/bin/env bash
# Policy fan-out: one learner publishes a 64 MiB policy version; how long
# until the last of 1000 workers holds it, and what the broker sends, with
# node-level fan-out (50 nodes × 20 workers, one learner.Subscriber per
# node) against direct per-worker subscription (every worker fetches).
#
#   1. builds simtel, starts a broker (fresh data directory, --http-listen
#      for its /metrics)
#   2. node step: `simtel bench fanout --mode node` with NODES × WORKERS
#      workers; it measures the loopback bandwidth first, publishes a warm-up
#      version, then SIZE bytes, and reads the broker's egress counters
#      before and after
#   3. direct step: `simtel bench fanout --mode direct` with DIRECT_NODES ×
#      DIRECT_WORKERS direct subscribers (by default as many as the node
#      step has workers: 1000 fetches of 64 MiB, 67 GB of egress, take
#      about a minute here)
#   4. diagnostic step (NODE1=1, the default): node mode with one worker
#      per node, to separate the broker-to-node fan-out from the emulated
#      workers' local reads, which share this machine's cores
#   5. read step (READ=1, the default): node mode again, but every worker
#      reads the whole file into a buffer of its own instead of mapping the
#      node's copy; the local copies' cost, shown apart from the fan-out
#   6. publishes bench/results/fanout/<id>.json and the fan-out results in
#      bench/docs/fanout.md
#
# Takes about 2 minutes with the defaults.
#
# Knobs (environment): NODES (50), WORKERS (20), SIZE (64MiB), DIRECT_NODES
# and DIRECT_WORKERS (default NODES and WORKERS; direct mode runs their
# product of subscribers), POLL (direct subscribers' Latest interval,
# 500ms), NODE1 (1: run the diagnostic step; empty: skip it), READ (1: run
# the step whose workers read their own copy; empty: skip it), PROFILE=1 (a
# CPU profile of the bench process per step, kept in
# bench/results/fanout/<id>-<step>.pprof, or the temporary directory with
# NO_PUBLISH), KEEP=1 keeps the temporary directory, NO_PUBLISH=1 leaves
# bench/results and bench/docs/fanout.md alone.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin

NODES=${NODES:-50}
WORKERS=${WORKERS:-20}
SIZE=${SIZE:-64MiB}
DIRECT_NODES=${DIRECT_NODES:-$NODES}
DIRECT_WORKERS=${DIRECT_WORKERS:-$WORKERS}
POLL=${POLL:-500ms}
NODE1=${NODE1-1}
READ=${READ-1}

source "$REPO/bench/lib.sh"

# --- build ---------------------------------------------------------------------

build_simtel
WORK=$(mktemp -d -t simtel-fanout.XXXXXX)
RUN=$WORK/run.json
ID=$(date -u +%Y-%m-%d-%H%M%S)
# The code measured is the working tree's: say which, and whether the parts
# on the data path had uncommitted changes.
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$REPO" status --porcelain -- learner broker bench 2>/dev/null | awk '{print $2}' | cut -d/ -f1 | sort -u | tr '\n' ' ')
if [[ -n $DIRTY ]]; then
	REV="$REV with uncommitted changes in ${DIRTY% }"
fi
SHM="no /dev/shm"
if [[ -d /dev/shm ]]; then
	SHM="node caches on /dev/shm (tmpfs)"
fi
HOST="$(host_desc), $SHM, code at $REV, $(go version | cut -d' ' -f3)"
results_to fanout fanout.md
mkdir -p "$RESULTS"

# --- broker -----------------------------------------------------------------------

BPORT=$(free_port 29392)
HPORT=$(free_port $((BPORT + 1)))
BROKER=127.0.0.1:$BPORT
METRICS=http://127.0.0.1:$HPORT/metrics
log "starting simtel broker on $BROKER (metrics on $METRICS)"
BROKER_ARGS=(broker --data-dir "$WORK/broker" --listen "$BROKER" --http-listen "127.0.0.1:$HPORT" --log-level warn)
"$SIMTEL" "${BROKER_ARGS[@]}" >"$WORK/broker.log" 2>&1 &
BROKER_PID=$!
PIDS+=("$BROKER_PID")
wait_port "$BPORT" "$BROKER_PID" "$WORK/broker.log"
wait_port "$HPORT" "$BROKER_PID" "$WORK/broker.log"
BROKER_CMD="$(show_rel "$SIMTEL" "${BROKER_ARGS[@]}") &"

# --- steps ------------------------------------------------------------------------

NL=$'\n'
FAILED=()
STEP=0
# step LABEL MODE NODES WORKERS [FLAG...]: one `simtel bench fanout` run,
# added to the run file whatever its outcome.
step() {
	local label=$1 mode=$2 nodes=$3 workers=$4
	shift 4
	STEP=$((STEP + 1))
	local cmd=("$SIMTEL" bench fanout --brokers "$BROKER" --broker-metrics "$METRICS" --broker-pid "$BROKER_PID"
		--mode "$mode" --nodes "$nodes" --workers-per-node "$workers" --size "$SIZE"
		--policy "fanout-$STEP-$mode-${nodes}x$workers" --log-level warn --json "$@")
	if [[ $mode == direct ]]; then
		cmd+=(--poll-interval "$POLL")
	fi
	if [[ -n ${PROFILE:-} ]]; then
		cmd+=(--cpu-profile "$RESULTS/$ID-$STEP-$mode.pprof")
	fi
	log "$label: $(show_rel "${cmd[@]}")"
	local out=$WORK/step-$STEP.json err=$WORK/step-$STEP.err failed=""
	"${cmd[@]}" 2>&1 >"$out" | tee "$err" >&2 || failed="exit status ${PIPESTATUS[0]}: $(grep -v '^fanout ' "$err" | tail -n1)"
	if ! kill -0 "$BROKER_PID" 2>/dev/null; then
		failed="${failed:+$failed; }the broker exited: $(tail -n1 "$WORK/broker.log")"
	fi
	step_failed "$label" "$failed"
	"$SIMTEL" bench fanout-report add --run "$RUN" --label "$label" \
		--command "$BROKER_CMD$NL$(show_rel "${cmd[@]}")" --failed "$failed" --input "$out"
	# Let the page cache writeback and the broker's goroutines settle.
	sleep 2
}

step "node ${NODES}×${WORKERS}" node "$NODES" "$WORKERS"
step "direct $((DIRECT_NODES * DIRECT_WORKERS))" direct "$DIRECT_NODES" "$DIRECT_WORKERS"
if [[ -n $NODE1 ]]; then
	step "node ${NODES}×1 (diagnostic)" node "$NODES" 1
fi
if [[ -n $READ ]]; then
	step "node ${NODES}×${WORKERS}, workers read their own copy" node "$NODES" "$WORKERS" --worker-load read
fi

broker_alive "$BROKER_PID" || FAILED+=("broker")

# --- report -----------------------------------------------------------------------

publish_run fanout-report fanout.sh "NODES=$NODES WORKERS=$WORKERS SIZE=$SIZE DIRECT_NODES=$DIRECT_NODES DIRECT_WORKERS=$DIRECT_WORKERS POLL=$POLL NODE1=$NODE1 READ=$READ${PROFILE:+ PROFILE=1}"
