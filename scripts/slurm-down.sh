#!/usr/bin/env bash
# Stops the test cluster of scripts/slurm-up.sh: cancels its jobs, stops
# slurmd, slurmctld and munged by pid file, and removes the empty freezer
# cgroups slurmd left. PURGE=1 also deletes $SIMTEL_SLURM_BASE (state, logs).
set -uo pipefail
base=${SIMTEL_SLURM_BASE:-/tmp/simtel-slurm}
export SLURM_CONF=$base/etc/slurm.conf

source "$(dirname "${BASH_SOURCE[0]}")/pidfiles.sh"

if [ -f "$SLURM_CONF" ] && [ -s "$base/run/slurmctld.pid" ]; then
  scancel --full --quiet "--user=$(id -un)" 2>/dev/null
fi
halt "$base"/run/slurmd-*.pid "$base/run/slurmctld.pid"
# munged serves only this cluster here; a host with a real munged keeps it
# (SIMTEL_SLURM_KEEP_MUNGE=1).
[ "${SIMTEL_SLURM_KEEP_MUNGE:-0}" = 1 ] || halt /run/munge/munged.pid
for c in /sys/fs/cgroup/freezer/slurm_n*; do
  [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null
done
[ "${PURGE:-0}" = 1 ] && rm -rf "$base"
echo "slurm-down: stopped (base $base)" >&2
exit 0
