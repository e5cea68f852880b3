#!/usr/bin/env bash
# Side-by-side benchmark of `simtel broker` and NATS JetStream, in one run on
# this machine, with the same record size and client count:
#
#   1. the disk: sequential 1 MiB writes + fdatasync, 4 KiB appends + fdatasync
#   2. simtel broker: `simtel bench produce` (acks=all) at full speed and
#      paced at a quarter of that rate, then `simtel bench consume` raw and with
#      kgo's PollFetches (from the page cache); then, on the same broker,
#      shorter produce runs over its PLAINTEXT and its SASL_SSL listener
#      (SCRAM-SHA-512), two each, and both consumes again over SASL_SSL
#   3. nats-server -js: `nats bench js pub async` with the server's default
#      sync_interval and with sync_interval always (fsync before every ack,
#      the durability of acks=all here), plus `js pub sync`
#   4. the disk again, with a sustained test (the burst a virtual disk
#      absorbs can be several times what it sustains)
#
# Results go to bench/results/<id>.json and <id>.svg, and the results
# section of bench/docs/produce-consume.md is rewritten. Takes about a minute and a half
# with the tools installed (the first run installs nats-server and natscli
# into .bin/, which takes a few minutes more).
#
# Knobs (environment): DURATION, PACED_DURATION, PACED_DIVISOR, SUSTAIN_TIME, PARTITIONS, PRODUCERS, LINGER,
# SECURE_DURATION, JS_MSGS, JS_ALWAYS_MSGS, JS_CLIENTS, BENCH_DATA_DIR (a directory on the disk to
# test; default a temporary directory), KEEP=1 keeps the data directory,
# NO_PUBLISH=1 leaves bench/results and that page alone, SIMTEL_ONLY=1 runs
# steps 1 and 2 only (no NATS, no sustained disk test), NO_SASL=1 leaves out
# the SASL_SSL steps (for a simtel without --listeners), SIMTEL_BIN=PATH
# measures that simtel binary (broker and clients) instead of building the
# working tree's, PORT_BASE=N000 picks ports from N000 on (bench/lib.sh). The SASL_SSL steps
# need openssl (for a throwaway CA and the broker's certificate); without it
# they are skipped with a warning.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin
NATS_SERVER_MODULE=github.com/nats-io/nats-server/v2
NATS_SERVER_VERSION=v2.15.2
NATSCLI_MODULE=github.com/nats-io/natscli/nats
NATSCLI_VERSION=v0.5.0

DURATION=${DURATION:-15s}
PACED_DURATION=${PACED_DURATION:-8s}
SUSTAIN_TIME=${SUSTAIN_TIME:-8s}
PACED_DIVISOR=${PACED_DIVISOR:-4}
PARTITIONS=${PARTITIONS:-4}
PRODUCERS=${PRODUCERS:-2}
LINGER=${LINGER:-2ms} # neutral at full speed; at the paced rate it keeps batches from being tiny
SECURE_DURATION=${SECURE_DURATION:-6s}
RECORD_SIZE=1024 # nats bench --size=1KB is 1024 bytes too
JS_MSGS=${JS_MSGS:-400000}
JS_ALWAYS_MSGS=${JS_ALWAYS_MSGS:-30000}
JS_CLIENTS=${JS_CLIENTS:-$PRODUCERS}

source "$REPO/bench/lib.sh"

# --- processes and cleanup -------------------------------------------------

# stop_last ends the most recently started process and waits for it.
stop_last() {
	local pid=${PIDS[-1]}
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	unset 'PIDS[-1]'
}

# records_per_s FILE: the whole records/s of a produce result, 0 if none.
records_per_s() {
	local r
	r=$(grep -m1 -o '"records_per_s": [0-9.]*' "$1" | awk '{printf "%d", $2}' || true)
	echo "${r:-0}"
}

# make_tls DIR: a throwaway CA and a certificate for 127.0.0.1 signed by it
# (DIR/ca.pem, DIR/broker.pem, DIR/broker-key.pem); fails with a warning
# when openssl is missing or fails.
make_tls() {
	if ! command -v openssl >/dev/null; then
		echo "WARNING: no openssl: the SASL_SSL steps are skipped" >&2
		return 1
	fi
	mkdir -p "$1"
	if ! (
		cd "$1" &&
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
			-subj "/CN=simtel bench CA" -keyout ca-key.pem -out ca.pem &&
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=broker" \
			-keyout broker-key.pem -out broker.csr &&
			printf 'subjectAltName=IP:127.0.0.1\n' >broker.ext &&
			openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
			-extfile broker.ext -out broker.pem
	) >"$1/openssl.log" 2>&1; then
		echo "WARNING: openssl failed, the SASL_SSL steps are skipped: $(tail -n1 "$1/openssl.log")" >&2
		return 1
	fi
}

# --- tools -------------------------------------------------------------------

# install_tool NAME MODULE VERSION: go install unless .bin/NAME reports VERSION.
install_tool() {
	if [[ -x $BIN/$1 ]] && "$BIN/$1" --version 2>&1 | grep -qF "${3#v}"; then
		return 0
	fi
	log "installing $2@$3 into $BIN"
	(cd "$REPO" && GOBIN=$BIN GOFLAGS= go install "$2@$3")
}

mkdir -p "$BIN"
if [[ -z ${SIMTEL_ONLY:-} ]]; then
	install_tool nats-server "$NATS_SERVER_MODULE" "$NATS_SERVER_VERSION"
	install_tool nats "$NATSCLI_MODULE" "$NATSCLI_VERSION"
fi
build_simtel
NATS=$BIN/nats
NATS_SERVER=$BIN/nats-server

if [[ -n ${BENCH_DATA_DIR:-} ]]; then
	mkdir -p "$BENCH_DATA_DIR"
	WORK=$(mktemp -d "$BENCH_DATA_DIR/simtel-compare.XXXXXX")
else
	WORK=$(mktemp -d -t simtel-compare.XXXXXX)
fi
RUN=$WORK/run.json
ID=$(date -u +%Y-%m-%d-%H%M%S)
HOST=$(host_desc)

# step KIND LABEL CMD...: run CMD, keep its stdout as the step's output,
# and add it to the run with the exact command. A command that fails is
# recorded with its last line of output and the run goes on: the README
# then says which step failed and leaves its figures out.
step() {
	local kind=$1 label=$2
	shift 2
	log "$label: $(show "$@")"
	local n=$(( ${#STEPS[@]} + 1 ))
	local out=$WORK/step-$n.out err=$WORK/step-$n.err failed=""
	if [[ $kind == jetstream ]]; then
		# natscli prints its header on stderr and its figures on stdout.
		"$@" 2>&1 | tee "$out" >&2 || failed="exit status ${PIPESTATUS[0]}: $(tail -n1 "$out")"
	else
		# stdout (the JSON result) to the file, stderr to the terminal and a file.
		"$@" 2>&1 >"$out" | tee "$err" >&2 || failed="exit status ${PIPESTATUS[0]}: $(grep -v '^\(produce\|consume\) ' "$err" | tail -n1)"
	fi
	step_failed "$label" "$failed"
	STEPS+=("$label")
	LAST_OUT=$out
	"$SIMTEL" bench report add --run "$RUN" --kind "$kind" --label "$label" \
		--command "${SERVER_CMD:+$SERVER_CMD$NL}$(show "$@")" --server-sync "${SERVER_SYNC:-}" \
		--failed "$failed" --input "$out"
}
FAILED=()
STEPS=()
NL=$'\n'

# --- 1. disk -----------------------------------------------------------------

step disk "disk fdatasync" "$SIMTEL" bench disk --dir "$WORK/disk" --json

# --- 2. simtel -----------------------------------------------------------------

PORT=$(free_port 29092)
BROKER=127.0.0.1:$PORT
BROKER_ARGS=(--data-dir "$WORK/simtel" --listen "$BROKER")
SECURE=""
if [[ -z ${NO_SASL:-} ]] && make_tls "$WORK/tls"; then
	# The same broker also serves a SASL_SSL listener, so PLAINTEXT and
	# SASL_SSL are compared on one broker, one disk and one run.
	SPORT=$(free_port $((PORT + 1)))
	SECURE=127.0.0.1:$SPORT
	BROKER_ARGS=(--data-dir "$WORK/simtel"
		--listeners "plain=PLAINTEXT://$BROKER,secure=SASL_SSL://$SECURE"
		--tls-cert "$WORK/tls/broker.pem" --tls-key "$WORK/tls/broker-key.pem"
		--sasl-mechanisms SCRAM-SHA-512)
fi
log "starting simtel broker on $BROKER${SECURE:+ and SASL_SSL on $SECURE}"
"$SIMTEL" broker "${BROKER_ARGS[@]}" --log-level warn >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
wait_port "$PORT" "${PIDS[-1]}" "$WORK/broker.log"
SERVER_CMD="$(show "$SIMTEL" broker "${BROKER_ARGS[@]}" --log-level warn) &"

step produce "simtel produce" "$SIMTEL" bench produce --brokers "$BROKER" --topic bench \
	--partitions "$PARTITIONS" --producers "$PRODUCERS" --record-size "$RECORD_SIZE" \
	--acks all --linger "$LINGER" --duration "$DURATION" --warmup 2s --json
# The same load held to a quarter of the rate just measured (PACED_DIVISOR):
# latency without the client's queue in it, at a load the disk sustains.
FULL_RATE=$(records_per_s "$LAST_OUT")
PACED_RATE=$(( FULL_RATE / PACED_DIVISOR / 1000 * 1000 ))
if (( PACED_RATE > 0 )); then
	step produce "simtel produce paced" "$SIMTEL" bench produce --brokers "$BROKER" --topic bench-paced \
		--partitions "$PARTITIONS" --producers "$PRODUCERS" --record-size "$RECORD_SIZE" \
		--acks all --linger "$LINGER" --rate "$PACED_RATE" --duration "$PACED_DURATION" --warmup 1s --json
fi
step consume "simtel consume raw" "$SIMTEL" bench consume --brokers "$BROKER" --topic bench \
	--raw --consumers 2 --json
step consume "simtel consume poll" "$SIMTEL" bench consume --brokers "$BROKER" --topic bench --json

# PLAINTEXT against SASL_SSL: shorter runs of the same load in the order
# PLAINTEXT, SASL_SSL, SASL_SSL, PLAINTEXT, so that a drift of the shared
# machine or the disk over the four (the first produce run may have had the
# disk's burst) weighs on both alike; each protocol's rate is the mean of
# its two runs. Then the topic the first run wrote is read again over TLS,
# where Fetch answers go through the TLS layer instead of sendfile(2).
if [[ -n $SECURE ]]; then
	printf 'bench-%s\n' "$RANDOM$RANDOM" >"$WORK/bench.password"
	"$SIMTEL" user add bench --brokers "$BROKER" --password-file "$WORK/bench.password" >&2
	SEC_FLAGS=(--security-protocol SASL_SSL --sasl-mechanism SCRAM-SHA-512 --sasl-username bench
		--sasl-password-file "$WORK/bench.password" --tls-ca "$WORK/tls/ca.pem")
	PLAIN_SUM=0
	SASL_SUM=0
	pair_produce() { # N PROTOCOL
		local label="simtel produce $2 $1/2" topic=bench-plain addr=$BROKER flags=()
		if [[ $2 == SASL_SSL ]]; then
			label="simtel produce SASL_SSL SCRAM-SHA-512 $1/2" topic=bench-sasl addr=$SECURE flags=("${SEC_FLAGS[@]}")
		fi
		step produce "$label" "$SIMTEL" bench produce --brokers "$addr" "${flags[@]}" --topic "$topic-$1" \
			--partitions "$PARTITIONS" --producers "$PRODUCERS" --record-size "$RECORD_SIZE" \
			--acks all --linger "$LINGER" --duration "$SECURE_DURATION" --warmup 1s --json
		if [[ $2 == SASL_SSL ]]; then
			SASL_SUM=$(( SASL_SUM + $(records_per_s "$LAST_OUT") ))
		else
			PLAIN_SUM=$(( PLAIN_SUM + $(records_per_s "$LAST_OUT") ))
		fi
	}
	pair_produce 1 PLAINTEXT
	pair_produce 1 SASL_SSL
	pair_produce 2 SASL_SSL
	pair_produce 2 PLAINTEXT
	if (( PLAIN_SUM > 0 )); then
		log "produce over SASL_SSL: $(( SASL_SUM / 2 )) records/s, $(( SASL_SUM * 100 / PLAIN_SUM ))% of PLAINTEXT's $(( PLAIN_SUM / 2 ))"
	fi
	step consume "simtel consume raw SASL_SSL" "$SIMTEL" bench consume --brokers "$SECURE" "${SEC_FLAGS[@]}" \
		--topic bench --raw --consumers 2 --json
	step consume "simtel consume poll SASL_SSL" "$SIMTEL" bench consume --brokers "$SECURE" "${SEC_FLAGS[@]}" \
		--topic bench --json
fi
broker_alive "${PIDS[-1]}" || exit 1
stop_last
SERVER_CMD=""
rm -rf "$WORK/simtel" # give the page cache and the disk back before the peer runs

if [[ -z ${SIMTEL_ONLY:-} ]]; then

# --- 3. NATS JetStream ---------------------------------------------------------

PORT=$(free_port 24222)
NATS_URL=nats://127.0.0.1:$PORT
js_bench() { # LABEL MODE CLIENTS MSGS
	step jetstream "$1" "$NATS" -s "$NATS_URL" --timeout=30s bench js pub "$2" bench.js --create --storage=file \
		--size=1KB --msgs="$4" --clients="$3" --purge --no-progress
}

log "starting nats-server -js (default sync_interval) on $NATS_URL"
"$NATS_SERVER" -a 127.0.0.1 -p "$PORT" -js -sd "$WORK/nats" >"$WORK/nats.log" 2>&1 &
PIDS+=($!)
wait_port "$PORT" "${PIDS[-1]}" "$WORK/nats.log"
SERVER_CMD="$(show "$NATS_SERVER" -a 127.0.0.1 -p "$PORT" -js -sd "$WORK/nats") &"
SERVER_SYNC=""
js_bench "js pub async, 1 client" async 1 "$JS_MSGS"
js_bench "js pub async, $JS_CLIENTS clients" async "$JS_CLIENTS" "$JS_MSGS"
js_bench "js pub sync, 1 client" sync 1 20000
stop_last
rm -rf "$WORK/nats"

log "starting nats-server -js with sync_interval: always on $NATS_URL"
cat >"$WORK/nats-always.conf" <<EOF
listen: 127.0.0.1:$PORT
jetstream {
  store_dir: "$WORK/nats-always"
  sync_interval: always
}
EOF
"$NATS_SERVER" -c "$WORK/nats-always.conf" >"$WORK/nats-always.log" 2>&1 &
PIDS+=($!)
wait_port "$PORT" "${PIDS[-1]}" "$WORK/nats-always.log"
SERVER_CMD="$(show "$NATS_SERVER" -c "$WORK/nats-always.conf") &  # listen: 127.0.0.1:$PORT, jetstream { store_dir: \$WORK/nats-always, sync_interval: always }"
SERVER_SYNC=always
js_bench "js pub async, $JS_CLIENTS clients, sync always" async "$JS_CLIENTS" "$JS_ALWAYS_MSGS"
stop_last
SERVER_SYNC=""
rm -rf "$WORK/nats-always"

# --- 4. the disk again, sustained ---------------------------------------------
# A shared virtual disk's speed moves, and it may take a burst much faster
# than it sustains: measure again, with a sustained test (last, since it
# uses the burst up). The summary takes the better of the two measurements.
step disk "disk fdatasync, again, sustained" "$SIMTEL" bench disk --dir "$WORK/disk" --sustain-time "$SUSTAIN_TIME" --json
fi # SIMTEL_ONLY

# --- report ----------------------------------------------------------------------

results_to "" produce-consume.md
publish_run report compare.sh "DURATION=$DURATION PACED_DURATION=$PACED_DURATION PACED_DIVISOR=$PACED_DIVISOR SUSTAIN_TIME=$SUSTAIN_TIME PARTITIONS=$PARTITIONS PRODUCERS=$PRODUCERS LINGER=$LINGER SECURE_DURATION=$SECURE_DURATION JS_MSGS=$JS_MSGS JS_ALWAYS_MSGS=$JS_ALWAYS_MSGS JS_CLIENTS=$JS_CLIENTS${SIMTEL_ONLY:+ SIMTEL_ONLY=1}"
