# Shared by the benchmark scripts (compare.sh, agent-cost.sh, fanout.sh,
# agent-ab.sh, before-after.sh): logging, a script's usage, the processes a
# script started and their cleanup, ports, building simtel, the host line,
# where results go, how commands are shown, how failed steps are reported
# and how a run is published. Source it after setting REPO and BIN; a
# script may define cleanup_extra, which runs after its processes are
# stopped and before the work directory goes.

log() { printf '\n== %s\n' "$*" >&2; }

# need_args N COUNT: unless COUNT (the script's $#) is N, print the
# script's header comment, its lines up to `set -e`, as its usage and exit 2.
need_args() {
	if (($2 != $1)); then
		sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 2
	fi
}

PIDS=() # processes started in the background, stopped on exit
WORK="" # temporary directory, removed on exit unless KEEP is set

cleanup() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	done
	if declare -F cleanup_extra >/dev/null; then
		cleanup_extra
	fi
	if [[ -n $WORK && -z ${KEEP:-} ]]; then
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# free_port prints the first port from $1 on that nothing uses, TCP or UDP.
# With PORT_BASE (a multiple of 1000) the search starts at PORT_BASE plus
# $1's last three digits instead, so that a run keeps to a range of ports
# given to it on a machine others share.
free_port() {
	local p=$1
	if [[ -n ${PORT_BASE:-} ]]; then
		p=$((PORT_BASE + p % 1000))
	fi
	while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null ||
		grep -qi ":$(printf '%04X' "$p") " /proc/net/udp /proc/net/tcp 2>/dev/null; do
		p=$((p + 1))
	done
	echo "$p"
}

# wait_tcp ADDR PORT PID LOG [SECONDS]: wait until ADDR:PORT accepts
# connections while PID is alive, at most SECONDS (default 20); on failure
# print LOG.
wait_tcp() {
	local tries=$(( ${5:-20} * 10 ))
	for _ in $(seq "$tries"); do
		if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$3" 2>/dev/null; then
			echo "process exited before listening on $1:$2:" >&2
			cat "$4" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "nothing listening on $1:$2 after ${5:-20}s:" >&2
	cat "$4" >&2
	return 1
}

# wait_port PORT PID LOG: wait_tcp on 127.0.0.1.
wait_port() { wait_tcp 127.0.0.1 "$@"; }

# build_simtel builds the working tree's simtel into $BIN and sets SIMTEL;
# with SIMTEL_BIN it sets SIMTEL to that binary and builds nothing.
build_simtel() {
	if [[ -n ${SIMTEL_BIN:-} ]]; then
		SIMTEL=$(realpath "$SIMTEL_BIN")
		log "simtel is $SIMTEL (SIMTEL_BIN)"
		return 0
	fi
	mkdir -p "$BIN"
	log "building simtel"
	(cd "$REPO" && go build -o "$BIN/simtel" ./cmd/simtel)
	SIMTEL=$BIN/simtel
}

# host_desc prints the machine a run is on: CPUs, memory, kernel and the
# load at start.
host_desc() {
	printf '%s' "$(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg) at start"
}

# results_to SUBDIR PAGE sets RESULTS (bench/results/SUBDIR, or
# bench/results when SUBDIR is empty) and README (bench/docs/PAGE, the page
# whose results section the run rewrites); with NO_PUBLISH the results stay
# in $WORK/results, README is empty and the work directory is kept.
results_to() {
	if [[ -n ${NO_PUBLISH:-} ]]; then
		RESULTS=$WORK/results
		README=""
		KEEP=1
	else
		RESULTS=$REPO/bench/results${1:+/$1}
		README=$REPO/bench/docs/$2
	fi
}

# show prints a command as the README shows it: the binaries by their
# repository path, the temporary directory as $WORK.
show() {
	local s
	s=$(printf '%q ' "$@")
	s=${s% }
	s=${s//$BIN\//.bin/}
	s=${s//$WORK/\$WORK}
	printf '%s' "$s"
}

# show_rel is show with every other path in the repository relative to it.
show_rel() {
	local s
	s=$(show "$@")
	printf '%s' "${s//$REPO\//}"
}

# step_failed LABEL WHY: warn that a step failed and remember it in FAILED;
# nothing when WHY is empty.
step_failed() {
	if [[ -n $2 ]]; then
		echo "WARNING: step \"$1\" failed: $2" >&2
		FAILED+=("$1")
	fi
}

# broker_alive PID: whether the broker is still running; if not, say so
# with its log ($WORK/broker.log).
broker_alive() {
	if ! kill -0 "$1" 2>/dev/null; then
		echo "simtel broker died:" >&2
		cat "$WORK/broker.log" >&2
		return 1
	fi
}

# exit_if_failed lists the failed steps and exits 1 if there are any.
exit_if_failed() {
	if (( ${#FAILED[@]} > 0 )); then
		printf 'failed steps:' >&2
		printf ' "%s"' "${FAILED[@]}" >&2
		printf '\n' >&2
		exit 1
	fi
}

# publish_run REPORT SCRIPT ENVDESC: publish the run with `simtel bench
# REPORT publish`, recording as its command ENVDESC (the settings) and
# bench/SCRIPT, then exit 1 if any step failed.
publish_run() {
	log "publishing run $ID"
	"$SIMTEL" bench "$1" publish --run "$RUN" --results-dir "$RESULTS" --readme "$README" \
		--id "$ID" --host "$HOST" --command "$3 bench/$2"
	exit_if_failed
}
