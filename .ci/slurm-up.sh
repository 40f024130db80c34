#!/usr/bin/env bash
# Bring up a real single-node Slurm on this machine (as root), for a workstation (the tests
# bring up a cluster of their own: tests/slurm/cluster.py).
#
# munged, slurmctld and slurmd of Debian's slurm-wlm, configured for this host's real
# name, CPUs and memory (`slurmd -C`), process tracking by /proc (no cgroup plugin: the
# jobs' own ouro sets its ceilings, as on any host), one partition `ouro` that lets up to
# 8 jobs share each core (lineages mostly wait on their model), state under
# /var/lib/ouro-slurm. Idempotent: daemons already answering are left alone. Exits 0
# once `sinfo` shows the node idle (or mixed/allocated: already in use), else 1.
#
# Environment: OURO_SLURM_DIR (default /var/lib/ouro-slurm), OURO_SLURM_WAIT (seconds,
# default 50).
set -euo pipefail

dir=${OURO_SLURM_DIR:-/var/lib/ouro-slurm}
wait_s=${OURO_SLURM_WAIT:-50}
conf=/etc/slurm/slurm.conf

if [ "$(id -u)" != 0 ]; then
  echo "slurm-up: must run as root (it writes $conf and starts daemons)" >&2
  exit 1
fi
for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "slurm-up: $tool is missing: apt-get install -y slurm-wlm munge" >&2
    exit 1
  }
done

node_ready() {
  sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated|completing)'
}

if node_ready; then
  echo "slurm-up: already up: $(sinfo -h -N -o '%N %T %c CPUs %m MB')"
  exit 0
fi

# --- munge ------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  pkill_pidfile() { [ -s "$1" ] && kill "$(cat "$1")" 2>/dev/null || true; }
  pkill_pidfile /run/munge/munged.pid
  rm -f /run/munge/munge.socket.2 /run/munge/munged.pid
  su -s /bin/sh munge -c 'munged --force'
  for _ in $(seq 50); do
    munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
fi

# --- slurm.conf for this host -----------------------------------------------------
host=$(hostname -s)
node_line=$(slurmd -C | head -n 1)           # NodeName=... CPUs=... RealMemory=...
install -d -o slurm -g slurm -m 0755 "$dir" "$dir/ctld" "$dir/log"
install -d -m 0755 "$dir/d" /etc/slurm
cat >"$conf.new" <<EOF
# Written by ouro's .ci/slurm-up.sh: a single-node cluster on $host.
ClusterName=ouro
SlurmctldHost=$host
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/d
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MpiDefault=none
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmdTimeout=60
# Ask the scheduler often: tests and ouro's follower wait on job starts.
MessageTimeout=20
$node_line State=UNKNOWN
PartitionName=ouro Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
if ! cmp -s "$conf.new" "$conf"; then
  mv "$conf.new" "$conf"
  changed=1
else
  rm -f "$conf.new"
  changed=0
fi
chmod 0644 "$conf"

# --- daemons ----------------------------------------------------------------------
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "$changed" = 1 ]; then
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
    if running "$pidfile"; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
fi
running "$dir/slurmctld.pid" || slurmctld
running "$dir/slurmd.pid" || slurmd

for _ in $(seq $((wait_s * 4))); do
  if node_ready; then
    echo "slurm-up: up: $(sinfo -h -N -o '%N %T %c CPUs %m MB')"
    exit 0
  fi
  state=$(sinfo -h -N -o '%T' 2>/dev/null || true)
  case "$state" in
    down*|drain*) scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.25
done
echo "slurm-up: the node did not become idle within ${wait_s}s (sinfo: $(sinfo -N 2>&1 | tail -n +2))" >&2
tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
exit 1
