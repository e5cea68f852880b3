# Processes by pid file, for the scripts that start and stop the test
# cluster's daemons (slurm-up.sh, slurm-down.sh). Sourced, not run.

# running PIDFILE: the file names a live process.
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# halt PIDFILE...: SIGTERM to all at once, wait up to 5 s for all, then
# SIGKILL; the pid files are removed.
halt() {
  local pids=() f p alive
  for f in "$@"; do
    [ -s "$f" ] && p=$(cat "$f") && kill -0 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null && pids+=("$p")
    rm -f "$f"
  done
  for _ in $(seq 100); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0
    sleep 0.05
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  return 0
}
