#!/usr/bin/env bash
# Brings up a real Slurm cluster on this one host for simtel's tests:
# Debian's Slurm (22.05) and munge, one slurmctld and SIMTEL_SLURM_NODES
# slurmd daemons (default 3) emulating nodes n1..nN, no systemd needed.
# Prolog and Epilog run `simtel slurm prolog|epilog` (PrologFlags=Alloc).
# Slurm's InfluxDB profiler (acct_gather_profile/influxdb, Debian's
# slurm-wlm-influxdb-plugin) sends the samples of jobs submitted with
# --profile=task to the node-wide agent address SIMTEL_SLURM_PROFILE_HTTP.
#
# Safe to run again: a running cluster with the same configuration is left
# alone; a changed configuration restarts the daemons. Needs root.
#
# Environment:
#   SIMTEL_SLURM_BASE   where config, state, logs live (default /tmp/simtel-slurm)
#   SIMTEL_SLURM_NODES  emulated nodes (default 3)
#   SIMTEL_BIN          simtel binary to install as $BASE/bin/simtel (optional;
#                       tests install their freshly built binary there)
#   SIMTEL_SLURM_PROFILE_HTTP  where the profiler POSTs its samples: the HTTP
#                       listener of a node-wide agent (default 127.0.0.1:18186;
#                       nothing needs to listen there unless a job profiles)
#
# Clients (sbatch, squeue, the tests) need SLURM_CONF=$BASE/etc/slurm.conf,
# printed on the last line. scripts/slurm-down.sh stops everything.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
source "$(dirname "${BASH_SOURCE[0]}")/pidfiles.sh"

base=${SIMTEL_SLURM_BASE:-/tmp/simtel-slurm}
nodes=${SIMTEL_SLURM_NODES:-3}
profile_http=${SIMTEL_SLURM_PROFILE_HTTP:-127.0.0.1:18186}
conf=$base/etc/slurm.conf
host=$(hostname -s)
export SLURM_CONF=$conf

die() { echo "slurm-up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd and munged need it)"
[[ $nodes =~ ^[1-9][0-9]?$ ]] || die "SIMTEL_SLURM_NODES=$nodes is not a number from 1 to 99"

# --- packages --------------------------------------------------------------
missing=()
for c in slurmctld slurmd sbatch munged; do command -v $c >/dev/null || missing+=($c); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "slurm-up: installing slurmctld slurmd slurm-client munge (missing: ${missing[*]})" >&2
  ls /var/lib/apt/lists/*Packages* >/dev/null 2>&1 || apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi
if ! ls /usr/lib/*/slurm-wlm/acct_gather_profile_influxdb.so >/dev/null 2>&1; then
  echo "slurm-up: installing slurm-wlm-influxdb-plugin (Slurm's InfluxDB profiler)" >&2
  ls /var/lib/apt/lists/*Packages* >/dev/null 2>&1 || apt-get update -qq
  apt-get install -y -qq --no-install-recommends slurm-wlm-influxdb-plugin >/dev/null
fi

# --- name resolution: slurmd looks its node's hostname up ---------------------
getent hosts "$host" >/dev/null || echo "127.0.0.1 $host" >>/etc/hosts

# --- munge -----------------------------------------------------------------
munge_ok() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }
if ! munge_ok; then
  [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 100); do munge_ok && break; sleep 0.05; done
  munge_ok || die "munged did not start: see /var/log/munge/munged.log"
fi

# --- layout ------------------------------------------------------------------
mkdir -p "$base"/{etc,log,run,bin,spool/ctld}
names=()
for i in $(seq "$nodes"); do names+=("n$i"); mkdir -p "$base/spool/n$i"; done
if [ -n "${SIMTEL_BIN:-}" ]; then
  [ -x "$SIMTEL_BIN" ] || die "SIMTEL_BIN=$SIMTEL_BIN is not an executable"
  cp "$SIMTEL_BIN" "$base/bin/simtel.new" && mv -f "$base/bin/simtel.new" "$base/bin/simtel"
fi
touch "$base/etc/simtel-slurm.env"

# Slurm runs Prolog/Epilog (on each node) and the jobcomp script (on the
# controller, once per job, with the job's final state) as root with a bare
# environment and no arguments, so each is a two-line wrapper. A missing binary must not fail
# the job (a failing prolog drains the node): log and succeed.
for hook in prolog epilog jobcomp; do
  cat >"$base/etc/simtel-$hook.new" <<EOF
#!/bin/sh
# simtel $hook hook for this test cluster (written by scripts/slurm-up.sh)
if [ ! -x $base/bin/simtel ]; then
  echo "simtel-$hook: $base/bin/simtel is missing; no job event sent for job \$SLURM_JOB_ID" >>$base/log/simtel-hooks.log
  exit 0
fi
exec $base/bin/simtel slurm $hook --env-file $base/etc/simtel-slurm.env --log-file $base/log/simtel-hooks.log
EOF
  chmod 0755 "$base/etc/simtel-$hook.new"
  mv -f "$base/etc/simtel-$hook.new" "$base/etc/simtel-$hook"
done

# proctrack/cgroup (cgroup v1 freezer) kills every process a job left
# behind, daemonized or not; without a freezer, linuxproc follows the
# process tree only.
if grep -q ' /sys/fs/cgroup/freezer cgroup ' /proc/mounts; then proctrack=cgroup; else proctrack=linuxproc; fi
cpus=$(nproc)

if [ "$nodes" -gt 1 ]; then
  nodeline="NodeName=n[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 Port=17001-$((17000 + nodes)) CPUs=$cpus RealMemory=1000 State=UNKNOWN"
else
  nodeline="NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=17001 CPUs=$cpus RealMemory=1000 State=UNKNOWN"
fi

cat >"$conf.new" <<EOF
# Test cluster of simtel (scripts/slurm-up.sh); $nodes emulated nodes on $host.
ClusterName=simtel
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=6817
SlurmdPort=6818
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
# The profiler samples each task every second (22.05 has no
# ProfileInfluxDBFrequency: JobAcctGatherFrequency sets the period), for
# jobs submitted with --profile=task (acct_gather.conf: default None).
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
AcctGatherProfileType=acct_gather_profile/influxdb
AccountingStorageType=accounting_storage/none
# jobcomp/script hands the job's final state (JOBSTATE) to simtel.
JobCompType=jobcomp/script
JobCompLoc=$base/etc/simtel-jobcomp
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
PrologFlags=Alloc
Prolog=$base/etc/simtel-prolog
Epilog=$base/etc/simtel-epilog
PrologEpilogTimeout=60
SlurmctldPidFile=$base/run/slurmctld.pid
SlurmdPidFile=$base/run/slurmd-%n.pid
SlurmdSpoolDir=$base/spool/%n
StateSaveLocation=$base/spool/ctld
SlurmctldLogFile=$base/log/slurmctld.log
SlurmdLogFile=$base/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
$nodeline
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
if [ $proctrack = cgroup ]; then
  # The freezer tracks processes; no resource limits in this test cluster.
  printf '%s\n' CgroupPlugin=cgroup/v1 CgroupMountpoint=/sys/fs/cgroup \
    ConstrainCores=no ConstrainRAMSpace=no ConstrainDevices=no >"$base/etc/cgroup.conf"
else
  rm -f "$base/etc/cgroup.conf"
fi
cat >"$base/etc/acct_gather.conf.new" <<EOF
# Slurm's InfluxDB profiler, read by slurmd next to slurm.conf. The plugin
# POSTs /write?db=slurm&rp=autogen&precision=s to the node-wide agent.
ProfileInfluxDBHost=http://$profile_http
ProfileInfluxDBDatabase=slurm
ProfileInfluxDBRTPolicy=autogen
ProfileInfluxDBDefault=None
EOF
changed=0
for f in "$conf" "$base/etc/acct_gather.conf"; do
  if cmp -s "$f.new" "$f"; then rm -f "$f.new"; else mv -f "$f.new" "$f"; changed=1; fi
done

# --- daemons -----------------------------------------------------------------
if [ $changed = 1 ]; then
  halt "$base"/run/slurmd-*.pid "$base/run/slurmctld.pid"
fi
running "$base/run/slurmctld.pid" || slurmctld -f "$conf"
for _ in $(seq 200); do scontrol ping 2>/dev/null | grep -q 'is UP' && break; sleep 0.05; done
scontrol ping 2>/dev/null | grep -q 'is UP' || { tail -20 "$base/log/slurmctld.log" >&2; die "slurmctld did not come up"; }
for n in "${names[@]}"; do running "$base/run/slurmd-$n.pid" || slurmd -f "$conf" -N "$n"; done

# Nodes are usable once idle (or busy); an old state may have left them down.
usable() {
  local c
  c=$(sinfo -h -N -t idle,mixed,allocated,completing -o %N 2>/dev/null | sort -u | wc -l)
  [ "$c" -ge "$nodes" ]
}
for _ in $(seq 300); do
  usable && break
  for n in $(sinfo -h -N -t down,drain,fail -o %N 2>/dev/null | sort -u); do
    scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
  done
  sleep 0.1
done
usable || { sinfo -N >&2; tail -5 "$base"/log/slurmd-*.log >&2; die "nodes did not become idle"; }
echo "slurm-up: $(sinfo -h -o '%D nodes %T %N' | tr '\n' ' ')(proctrack/$proctrack)" >&2
echo "export SLURM_CONF=$conf"
