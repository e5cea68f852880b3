#!/usr/bin/env bash
# The CPU floor of issue 26's last-node target: what the kernel needs to
# move bytes over links like fanout-netns.sh's, and what Go's SHA-256 needs
# to check them, in CPU seconds per GiB; the numbers a node cannot go
# below per version whatever the agent does.
#
# Kernel: two network namespaces joined through a bridge by veth pairs
# limited with tc tbf at RATE both ways (as fanout-netns.sh makes them);
# one TCP stream of SIZE bytes from a file on /dev/shm, sent with sendfile
# and received into a 1 MiB buffer (python3, so that the user time of a Go
# runtime is not in it). The figure is the system time of both ends plus
# what the ksoftirqd threads used meanwhile; a busy machine inflates it.
# SHA-256: the CPU time of crypto/sha256's Hash1M benchmark over 1 GiB, with
# and without SHA-NI (GODEBUG=cpu.sha=off), which also shows that Go uses it.
#
# Needs root. Knobs: SIZE (bytes, 1073741824), RATE (1gbit), PORT (26500),
# NET (10.249: the /24 used is NET.0). Cleans up the namespaces, veths and
# bridge it made (named ff<tag>…, tag from this shell's pid) and its files.
set -euo pipefail

if [[ $(id -u) != 0 ]]; then
	echo "fanout-floor.sh: needs root for network namespaces and tc (try: sudo $0)" >&2
	exit 2
fi
SIZE=${SIZE:-1073741824}
RATE=${RATE:-1gbit}
PORT=${PORT:-26500}
NET=${NET:-10.249}
TAG=ff$(printf '%04x' $(($$ % 65536)))
FILE=/dev/shm/simtel-floor-$TAG

cleanup() {
	ip netns del "${TAG}a" 2>/dev/null || true
	ip netns del "${TAG}b" 2>/dev/null || true
	ip link del "${TAG}a" 2>/dev/null || true
	ip link del "${TAG}b" 2>/dev/null || true
	ip link del "${TAG}br" 2>/dev/null || true
	rm -f "$FILE" "$FILE.server" "$FILE.sha.test"
}
trap cleanup EXIT

ip link add "${TAG}br" type bridge
ip link set "${TAG}br" up
addr=1
for n in a b; do
	ip netns add "$TAG$n"
	ip link add "$TAG$n" type veth peer name eth0 netns "$TAG$n"
	ip link set "$TAG$n" master "${TAG}br" up
	ip -n "$TAG$n" link set lo up
	ip -n "$TAG$n" addr add "$NET.0.$addr/24" dev eth0
	ip -n "$TAG$n" link set eth0 up
	tc qdisc add dev "$TAG$n" root tbf rate "$RATE" burst 256kb latency 50ms
	tc -n "$TAG$n" qdisc add dev eth0 root tbf rate "$RATE" burst 256kb latency 50ms
	addr=2
done
head -c "$SIZE" /dev/urandom >"$FILE"

# softirq_ticks: user+system ticks of every ksoftirqd thread.
softirq_ticks() {
	local p t=0
	for p in $(pgrep ksoftirqd); do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}

# Each end prints its system CPU seconds.
server='import os, socket, sys
l = socket.create_server((sys.argv[1], int(sys.argv[2])))
c, _ = l.accept()
f = open(sys.argv[3], "rb")
n, size = 0, os.fstat(f.fileno()).st_size
while n < size:
    n += os.sendfile(c.fileno(), f.fileno(), n, size - n)
c.close()
print(os.times().system)'
client='import os, socket, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
        break
    except OSError:
        time.sleep(0.1)
b = bytearray(1 << 20)
n, t = 0, time.time()
while True:
    k = c.recv_into(b)
    if k == 0:
        break
    n += k
print(n, time.time() - t, os.times().system)'

k0=$(softirq_ticks)
ip netns exec "${TAG}a" python3 -c "$server" "$NET.0.1" "$PORT" "$FILE" >"$FILE.server" &
spid=$!
read -r got secs csys < <(ip netns exec "${TAG}b" python3 -c "$client" "$NET.0.1" "$PORT")
wait "$spid"
ssys=$(cat "$FILE.server")
rm -f "$FILE.server"
k1=$(softirq_ticks)
hz=$(getconf CLK_TCK)
gib=$(echo "$got / 1073741824" | bc -l)
printf 'kernel: %d bytes in %.2f s over %s links: sender %.2f + receiver %.2f system CPU-s + ksoftirqd %.2f s = %.2f CPU-s per GiB (load %s)\n' \
	"$got" "$secs" "$RATE" "$ssys" "$csys" "$(echo "($k1 - $k0) / $hz" | bc -l)" \
	"$(echo "($ssys + $csys + ($k1 - $k0) / $hz) / $gib" | bc -l)" "$(cut -d' ' -f1-3 /proc/loadavg)"

# SHA-256: the CPU time (user + system, bash's time) of hashing 1 GiB in
# 1 MiB writes, once as Go runs here and once with SHA-NI off.
go test -c -o "$FILE.sha.test" crypto/sha256
TIMEFORMAT=%U+%S
for g in "" cpu.sha=off; do
	t=$( { time GODEBUG=$g "$FILE.sha.test" -test.run '^$' -test.bench 'Hash1M/New' -test.benchtime 1024x >/dev/null; } 2>&1)
	printf 'sha256%s: %.2f CPU-s per GiB\n' "${g:+ ($g)}" "$(echo "$t" | bc -l)"
done
rm -f "$FILE.sha.test"
