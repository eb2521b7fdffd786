#!/usr/bin/env bash
# Starts a one-machine Slurm cluster (munged, slurmctld, slurmd) whose every
# file lives in one directory, for trying deploy/slurm/elastic.sbatch and for
# //tests:slurm_test. Needs root and Debian's `slurm-wlm` and `munge`
# (apt-get install slurm-wlm munge). Idempotent: a daemon already running from
# this directory is left alone, so running it twice is harmless.
#
#   deploy/slurm/start_cluster.sh [DIR]      # DIR: default /tmp/elastic-slurm
#   export SLURM_CONF=DIR/slurm.conf         # what it prints last; then sbatch, srun, squeue
#   deploy/slurm/stop_cluster.sh [DIR]
#
# Ports: ELASTIC_SLURMCTLD_PORT (default 6817) and ELASTIC_SLURMD_PORT (6818).
# DIR must be short: munge's socket lives in it (a Unix socket path has at
# most 107 bytes).
set -euo pipefail

dir=${1:-/tmp/elastic-slurm}
ctld_port=${ELASTIC_SLURMCTLD_PORT:-6817}
slurmd_port=${ELASTIC_SLURMD_PORT:-6818}

die() {
  echo "start_cluster.sh: $*" >&2
  exit 1
}

[[ $(id -u) == 0 ]] || die "needs root (slurmd starts job steps as their users)"
for tool in munged mungekey slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null || die "$tool not found: apt-get install slurm-wlm munge"
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# munged refuses a socket directory that others can write to.
chmod 0700 "$dir"
mkdir -p "$dir/munge" "$dir/ctld" "$dir/slurmd" "$dir/log"
chmod 0700 "$dir/munge"
(( ${#dir} < 80 )) || die "$dir is too long for munge's socket path; give a shorter DIR"

# True when the pid file $1 names a live process.
running() {
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# The munge key: one per cluster, kept across restarts (credentials made
# before a restart stay valid).
[[ -s $dir/munge/munge.key ]] || mungekey --create --keyfile="$dir/munge/munge.key"
chmod 0600 "$dir/munge/munge.key"

# slurm.conf, written once (atomically) so that a second start finds the
# daemons' own configuration. The node is this machine as slurmd -C sees it.
if [[ ! -s $dir/slurm.conf ]]; then
  node=$(hostname -s)
  hardware=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]* //')
  cat >"$dir/slurm.conf.tmp" <<EOF
# A one-machine cluster made by deploy/slurm/start_cluster.sh.
ClusterName=elastic
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
# munged of this directory, not the system's.
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/slurmd
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# Without cgroups (a container or a VM without systemd): processes are
# tracked through their parents, and tasks are not bound to cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# Cores are the consumable resource, so the steps of a job (one node agent
# each) share the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# A job that is cancelled, preempted or out of time gets SIGTERM, then this
# many seconds before SIGKILL: longer than a node agent's --drain-timeout
# (default 30 s), so its workers can leave at an epoch boundary.
KillWait=90
# The node comes back by itself after a restart.
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 $hardware State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  mv "$dir/slurm.conf.tmp" "$dir/slurm.conf"
fi
export SLURM_CONF=$dir/slurm.conf

if ! running "$dir/munge/munged.pid"; then
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed"
fi
running "$dir/slurmctld.pid" || slurmctld
running "$dir/slurmd.pid" || slurmd

# Ready once the node is idle (or already running jobs).
for _ in $(seq 1 60); do
  state=$(sinfo --noheader --format=%t 2>/dev/null | head -n 1 || true)
  case $state in
    idle | mix | alloc)
      echo "Slurm cluster in $dir is up (node $(hostname -s): $state)." >&2
      echo "export SLURM_CONF=$SLURM_CONF"
      exit 0
      ;;
  esac
  sleep 1
done
die "the node did not come up (state '${state:-none}'); see $dir/log/"
