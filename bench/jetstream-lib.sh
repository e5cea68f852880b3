# The one-client comparison of replication-figures.sh's `jetstream` mode:
# simtel RF 3 (and RF 1) against NATS JetStream R3 on three local servers,
# in alternating rounds. Source it after cluster-lib.sh has started the
# simtel cluster (it uses bin, seeds, work, base and pids).
#
# NATS ports: client $((base+40))N, cluster routes $((base+50))N.

NATS_SERVER_MODULE=github.com/nats-io/nats-server/v2
NATS_SERVER_VERSION=v2.15.2
NATSCLI_MODULE=github.com/nats-io/natscli/nats
NATSCLI_VERSION=v0.5.0
nats_bin=$PWD/.bin

# nats_install NAME MODULE VERSION: go install unless .bin/NAME reports VERSION.
nats_install() {
  if [ -x "$nats_bin/$1" ] && "$nats_bin/$1" --version 2>&1 | grep -qF "${3#v}"; then
    return 0
  fi
  echo "installing $2@$3 into $nats_bin"
  GOBIN=$nats_bin GOFLAGS= go install "$2@$3"
}

nport() { echo "$((base + 40))$1"; }
cport() { echo "$((base + 50))$1"; }

# nats_cluster: three nats-server processes with JetStream, one cluster.
nats_cluster() {
  local i routes=""
  for i in 0 1 2; do routes+="${routes:+,}nats://127.0.0.1:$(cport "$i")"; done
  for i in 0 1 2; do
    "$nats_bin/nats-server" -a 127.0.0.1 -p "$(nport "$i")" -n "js$i" -js -sd "$work/nats$i" \
      --cluster_name simtel-bench --cluster "nats://127.0.0.1:$(cport "$i")" --routes "$routes" \
      >>"$work/nats$i.log" 2>&1 &
    pids+=($!)
  done
  # JetStream answers once its meta group has a leader.
  local deadline=$((SECONDS + 60))
  until "$nats_bin/nats" -s "nats://127.0.0.1:$(nport 0)" account info >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "JetStream cluster did not come up in 60 s; see $work/nats0.log" >&2
      tail -5 "$work/nats0.log" >&2
      return 1
    fi
    sleep 1
  done
}

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# simtel_one TOPIC RF RECORDS: one producer at its defaults; prints records/s.
simtel_one() {
  "$bin" topic create "$1" --partitions 6 --replication-factor "$2" --brokers "$seeds" >/dev/null
  sleep 3
  local out
  out=$("$bin" bench produce --brokers "$seeds" --topic "$1" --records "$3" --record-size 1024 \
    --producers 1 --partitions 6 --quiet)
  echo "$out" | awk '{for (i = 2; i <= NF; i++) if ($i == "records/s,") {printf "%d\n", $(i-1); exit}}'
  "$bin" topic delete "$1" --brokers "$seeds" >/dev/null || true
}

# jetstream_one RECORDS: nats bench js pub async R3; prints msgs/s.
jetstream_one() {
  local out rate
  out=$("$nats_bin/nats" -s "nats://127.0.0.1:$(nport 0)" --timeout=30s bench js pub async bench.r3 \
    --create --replicas=3 --storage=file --purge --size=1KB --msgs="$1" --clients=1 --no-progress 2>&1) || true
  rate=$(echo "$out" | awk '/stats:/ {for (i = 1; i < NF; i++) if ($(i+1) ~ /^msgs\/sec/) {gsub(",", "", $i); print $i; exit}}')
  if [ -z "$rate" ]; then
    echo "nats bench gave no rate:" >&2
    echo "$out" | tail -5 >&2
  fi
  echo "$rate"
}

# jetstream_rounds ROUNDS RECORDS
jetstream_rounds() {
  nats_install nats-server "$NATS_SERVER_MODULE" "$NATS_SERVER_VERSION"
  nats_install nats "$NATSCLI_MODULE" "$NATSCLI_VERSION"
  nats_cluster
  local r rf3 js rf1 l
  : >"$work/rf3" ; : >"$work/js" ; : >"$work/ratio1"
  for r in $(seq 1 "$1"); do
    sync; l=$(cut -d' ' -f1 /proc/loadavg)
    rf3=$(simtel_one "one3-$r" 3 "$2")
    sync
    js=$(jetstream_one "$2")
    sync
    rf1=$(simtel_one "one1-$r" 1 "$2")
    echo "one client round $r: simtel RF 3 ${rf3:-?} records/s, JetStream R3 ${js:-?} msgs/s, simtel RF 1 ${rf1:-?} records/s ($2 x 1 KiB; load average $l before, $(cut -d' ' -f1 /proc/loadavg) after)"
    echo "${rf3:-0}" >>"$work/rf3"
    echo "${js:-0}" >>"$work/js"
    echo "scale=3; ${rf3:-0} * 3 / ${rf1:-1}" | bc >>"$work/ratio1"
  done
  local m3 mjs
  m3=$(median <"$work/rf3")
  mjs=$(median <"$work/js")
  local x="n/a (a JetStream round failed)"
  [ "${mjs:-0}" != 0 ] && x=$(echo "scale=2; $m3 / $mjs" | bc)
  echo "one client, median of $1 rounds: simtel RF 3 $m3 records/s, JetStream R3 $mjs msgs/s: RF 3 = $x x JetStream R3 (target 2)"
  echo "one client: RF 3 over a third of RF 1 per round: $(paste -sd' ' "$work/ratio1") (target 0.80)"
}
