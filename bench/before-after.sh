#!/usr/bin/env bash
# Two revisions side by side: builds simtel at each and runs the benchmarks
# with one build, then the other, in the same run, so that both see the same
# machine. For ROUNDS rounds, each build in turn (the before build first in
# odd rounds, the after build first in even ones, so that a drift of a
# shared machine over the run weighs on both alike) runs:
#
#   compare    bench/compare.sh's simtel steps (SIMTEL_ONLY=1): the broker
#              and its clients are the build; produce at full speed and
#              paced, consume raw and polled, produce and consume over
#              SASL_SSL (left out when a build has no --listeners). The disk's figures are the machine's, not simtel's:
#              they show how much the machine moved.
#   sink       simtel bench sink: Parquet encoding per CPU second (the wall
#              clock rate is mostly the machine's load) and bytes per sample
#              (which should not change at all).
#   agent      bench/agent-cost.sh with the build as the agent (AGENT_BIN):
#              CPU per line, RSS and its anonymous part (heap and stacks;
#              the rest is pages of the executable); its broker and
#              generator are the after build in both runs.
#
#   bench/before-after.sh REV_BEFORE REV_AFTER
#
# Revisions are anything git names (a hash, a tag, HEAD~3); each is
# exported with git archive and built, so uncommitted changes are not
# measured. Prints a table: each figure's median over the rounds for both
# builds, after/before, and each build's min-max. A difference is called
# one only when the two builds' ranges do not overlap; with 3 rounds on a
# busy machine that is the bar, and a ratio inside overlapping ranges is
# noise however far from 1 it is.
#
# Knobs (environment): ROUNDS (3), BENCHES ("compare sink agent"),
# COMPARE_DURATION (10s, compare.sh's DURATION), SINK_SAMPLES (1000000),
# AGENT_DURATION (10s), AGENT_RATES ("10000 100000 1000000"),
# AGENT_TRANSPORTS ("udp http"), PORT_BASE (ports of the brokers and agents
# from there, bench/lib.sh), KEEP=1 keeps the work directory (builds, every
# run's output, figures.tsv).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/.bin
source "$REPO/bench/lib.sh"
need_args 2 $#
ROUNDS=${ROUNDS:-3}
BENCHES=${BENCHES:-compare sink agent}
COMPARE_DURATION=${COMPARE_DURATION:-10s}
SINK_SAMPLES=${SINK_SAMPLES:-1000000}
AGENT_DURATION=${AGENT_DURATION:-10s}
AGENT_RATES=${AGENT_RATES:-10000 100000 1000000}
AGENT_TRANSPORTS=${AGENT_TRANSPORTS:-udp http}

WORK=$(mktemp -d -t simtel-before-after.XXXXXX)
declare -A REV BUILD
REV[before]=$(git -C "$REPO" rev-parse --short "$1^{commit}")
REV[after]=$(git -C "$REPO" rev-parse --short "$2^{commit}")

# build SIDE: export the side's revision and build its simtel.
build() {
	local side=$1 src=$WORK/src-$1
	mkdir -p "$src"
	log "building $side (${REV[$side]})"
	git -C "$REPO" archive "${REV[$side]}" | tar -x -C "$src"
	(cd "$src" && go build -o "$WORK/simtel-$side" ./cmd/simtel)
	BUILD[$side]=$WORK/simtel-$side
	rm -rf "$src"
}
build before
build after
# compare.sh's SASL_SSL steps need --listeners; a revision older than it
# runs without them on both sides, so that the steps compared are the same.
NO_SASL=""
for side in before after; do
	if ! "${BUILD[$side]}" broker --help 2>/dev/null | grep -q -- --listeners; then
		NO_SASL=1
		log "${REV[$side]} has no --listeners: compare.sh runs without its SASL_SSL steps"
	fi
done

FIG=$WORK/figures.tsv # round, side, figure, value
: >"$FIG"
FAILED=()

# figures ROUND SIDE: append tab-separated lines "figure<TAB>value" from
# stdin to FIG.
figures() {
	awk -F'\t' -v r="$1" -v s="$2" 'NF == 2 && $2 != "" && $2 != "null" {print r "\t" s "\t" $1 "\t" $2}' >>"$FIG"
}

run_compare() { # ROUND SIDE
	local dir=$WORK/compare-$1-$2
	mkdir -p "$dir"
	log "round $1, $2: compare.sh (simtel steps)"
	if ! TMPDIR=$dir SIMTEL_ONLY=1 NO_SASL=$NO_SASL NO_PUBLISH=1 SIMTEL_BIN=${BUILD[$2]} DURATION=$COMPARE_DURATION \
		"$REPO/bench/compare.sh" >"$dir/out.log" 2>&1; then
		step_failed "compare round $1 $2" "$(tail -n1 "$dir/out.log")"
	fi
	local run
	run=$(find "$dir" -name run.json | head -n1)
	[[ -n $run ]] || return 0
	jq -r '.steps[] | select(.error == null or .error == "") |
		if .produce and (.label | test("paced")) then
			(.label + ", p50 ms\t" + ((.produce.latency.p50_us / 1000) | tostring)),
			(.label + ", p99 ms\t" + ((.produce.latency.p99_us / 1000) | tostring))
		elif .produce then .label + ", records/s\t" + (.produce.records_per_s | tostring)
		elif .consume then .label + ", records/s\t" + (.consume.records_per_s | tostring)
		elif .disk then
			("machine: " + .label + ", MB/s\t" + (.disk.seq_mb_per_s | tostring)),
			("machine: " + .label + ", appends/s\t" + (.disk.appends_per_s | tostring))
		else empty end' "$run" | figures "$1" "$2"
}

run_sink() { # ROUND SIDE
	local out=$WORK/sink-$1-$2.json
	log "round $1, $2: simtel bench sink --samples $SINK_SAMPLES"
	if ! "${BUILD[$2]}" bench sink --samples "$SINK_SAMPLES" --json >"$out" 2>"$out.err"; then
		step_failed "sink round $1 $2" "$(tail -n1 "$out.err")"
		return 0
	fi
	jq -r '"sink: samples per CPU s\t" + (.samples_per_core_sec | tostring),
		"sink: samples/s\t" + (.samples_per_sec | tostring),
		"sink: Parquet bytes per sample\t" + (.parquet_bytes_per_sample | tostring)' "$out" | figures "$1" "$2"
}

run_agent() { # ROUND SIDE
	local dir=$WORK/agent-$1-$2
	mkdir -p "$dir"
	log "round $1, $2: agent-cost.sh"
	if ! TMPDIR=$dir NO_PUBLISH=1 SIMTEL_BIN=${BUILD[after]} AGENT_BIN=${BUILD[$2]} \
		DURATION=$AGENT_DURATION RATES=$AGENT_RATES TRANSPORTS=$AGENT_TRANSPORTS \
		"$REPO/bench/agent-cost.sh" >"$dir/out.log" 2>&1; then
		step_failed "agent round $1 $2" "$(tail -n1 "$dir/out.log")"
	fi
	local run
	run=$(find "$dir" -name run.json | head -n1)
	[[ -n $run ]] || return 0
	jq -r '.steps[] | select((.error == null or .error == "") and .result.agent != null) |
		("agent " + .label + ", CPU µs/line\t" + (.result.agent.step_cpu_us_per_line | tostring)),
		("agent " + .label + ", RSS MiB\t" + (.result.agent.rss_mib | tostring)),
		("agent " + .label + ", anonymous MiB\t" + (.result.agent.anon_mib | tostring))' "$run" | figures "$1" "$2"
}

for ((round = 1; round <= ROUNDS; round++)); do
	sides=(before after)
	if ((round % 2 == 0)); then
		sides=(after before)
	fi
	for bench in $BENCHES; do
		for side in "${sides[@]}"; do
			"run_$bench" "$round" "$side"
		done
	done
done

# --- table -------------------------------------------------------------------

printf '\nbefore %s, after %s, %d rounds; %s\n\n' "${REV[before]}" "${REV[after]}" "$ROUNDS" "$(host_desc)"
awk -F'\t' '
	function median(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	!($3 in seen) { seen[$3] = 1; order[++nf] = $3 }
	{ k = $3 SUBSEP $2; v[k, ++n[k]] = $4
	  if (!(k in lo) || $4 < lo[k]) lo[k] = $4
	  if (!(k in hi) || $4 > hi[k]) hi[k] = $4 }
	function fmt(x) { return x >= 100 ? sprintf("%.0f", x) : sprintf("%.3g", x) }
	END {
		printf "| figure | before (median) | after (median) | after/before | before min-max | after min-max | |\n"
		printf "|---|---|---|---|---|---|---|\n"
		for (f = 1; f <= nf; f++) {
			name = order[f]; b = name SUBSEP "before"; a = name SUBSEP "after"
			if (!n[b] || !n[a]) { printf "| %s | %s runs | %s runs | | | | missing |\n", name, n[b] + 0, n[a] + 0; continue }
			delete x; for (i = 1; i <= n[b]; i++) x[i] = v[b, i]; mb = median(x, n[b])
			delete x; for (i = 1; i <= n[a]; i++) x[i] = v[a, i]; ma = median(x, n[a])
			ratio = mb != 0 ? sprintf("%.3f", ma / mb) : "-"
			verdict = (lo[a] > hi[b] || hi[a] < lo[b]) ? "ranges apart" : "ranges overlap"
			printf "| %s | %s | %s | %s | %s-%s | %s-%s | %s |\n", name, fmt(mb), fmt(ma), ratio, fmt(lo[b]), fmt(hi[b]), fmt(lo[a]), fmt(hi[a]), verdict
		}
	}' "$FIG"
printf '\n'
if [[ -n ${KEEP:-} ]]; then
	log "kept $WORK (figures.tsv, each run's output)"
fi
exit_if_failed
