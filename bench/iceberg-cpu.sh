#!/usr/bin/env bash
# The sink's samples per CPU second with and without Iceberg commits, in
# alternate rounds of one run: `simtel bench sink --lake` writes and commits
# every flush as the sink does, and again with --iceberg-catalog (SQLite) to
# the lake's Iceberg tables too. Each run is a fresh process and a fresh lake.
#
#   SIMTEL_BIN=PATH (default: simtel on PATH), ROUNDS (7), SAMPLES (1000000),
#   FLUSHES (3: 1M samples are about 167 MB in the broker, three flushes at the
#   sink's default --flush-bytes of 64 MiB).
#
# Prints, per round, both runs and Iceberg's cost against the plain run, then
# the medians with their spread (min-max): the rounds' noise on a shared
# machine is often larger than the cost, so one round proves nothing.
set -euo pipefail
BIN=${SIMTEL_BIN:-simtel}
ROUNDS=${ROUNDS:-7} SAMPLES=${SAMPLES:-1000000} FLUSHES=${FLUSHES:-3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

run() { # run NAME [flags...]: samples per CPU second
	local dir=$WORK/$1
	shift
	rm -rf "$dir"
	"$BIN" bench sink --json --samples "$SAMPLES" --flushes "$FLUSHES" --lake "$dir" "$@" >"$WORK/out.json"
	jq -r '"\(.samples_per_core_sec|floor) \(.cpu_seconds) \(.iceberg_cpu_seconds // 0) \(.iceberg_commit_ms // 0)"' "$WORK/out.json"
}

echo "round plain_samples_per_cpu_s iceberg_samples_per_cpu_s iceberg_less_pct iceberg_commit_cpu_s iceberg_commit_ms iceberg_commit_cpu_pct"
for r in $(seq "$ROUNDS"); do
	read -r plain _ _ _ < <(run plain)
	read -r ice _ icpu ims < <(run iceberg --iceberg-catalog "sqlite:$WORK/iceberg/iceberg.db")
	awk -v r="$r" -v p="$plain" -v i="$ice" -v c="$icpu" -v m="$ims" -v n="$SAMPLES" \
		'BEGIN { printf "%d %d %d %.1f %.2f %.1f %.1f\n", r, p, i, 100 * (p - i) / p, c, m, 100 * c * i / n }'
done | tee "$WORK/rounds"
# stat COLUMN: the median of a column of the rounds, and its min..max
stat() { awk -v c="$1" '{ print $c }' "$WORK/rounds" | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s (%s..%s)", m, v[1], v[NR] }'; }
echo "median (min..max): plain $(stat 2), iceberg $(stat 3), iceberg_less_pct $(stat 4), iceberg_commit_cpu_pct $(stat 7)"
