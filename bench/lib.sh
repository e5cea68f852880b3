# Shared by the benchmark scripts (compare.sh, agent-cost.sh, fanout.sh):
# logging, the processes a script started and their cleanup, and ports.
# Source it after setting nothing; a script may define cleanup_extra, which
# runs after its processes are stopped and before the work directory goes.

log() { printf '\n== %s\n' "$*" >&2; }

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
free_port() {
	local p=$1
	while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null ||
		grep -qi ":$(printf '%04X' "$p") " /proc/net/udp /proc/net/tcp 2>/dev/null; do
		p=$((p + 1))
	done
	echo "$p"
}

# wait_port PORT PID LOG: wait until 127.0.0.1:PORT accepts connections
# while PID is alive; on failure print LOG.
wait_port() {
	for _ in $(seq 200); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 0
		fi
		if ! kill -0 "$2" 2>/dev/null; then
			echo "process exited before listening on port $1:" >&2
			cat "$3" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "nothing listening on port $1 after 20s:" >&2
	cat "$3" >&2
	return 1
}
