#!/usr/bin/env bash
# Stops the one-machine Slurm cluster that start_cluster.sh started in DIR
# (default /tmp/elastic-slurm): slurmd, slurmctld, munged, each by the pid in
# its pid file. Idempotent. `--purge` also removes DIR.
#
#   deploy/slurm/stop_cluster.sh [DIR] [--purge]
set -euo pipefail

dir=/tmp/elastic-slurm
purge=0
for arg in "$@"; do
  case $arg in
    --purge) purge=1 ;;
    *) dir=$arg ;;
  esac
done

# Sends SIGTERM to the process in pid file $1 and waits up to 30 s for it.
stop() {
  local pid_file=$1 pid
  [[ -s $pid_file ]] || return 0
  pid=$(cat "$pid_file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 300); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "stop_cluster.sh: $pid_file ($pid) did not stop in 30 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pid_file"
}


# Ends every job first: a job step's slurmstepd outlives slurmd.
cancel_jobs() {
  export SLURM_CONF=$dir/slurm.conf
  local jobs=()
  mapfile -t jobs < <(squeue --noheader --format=%i 2>/dev/null || true)
  ((${#jobs[@]} > 0)) || return 0
  # SIGKILL to every process of the jobs (--full: the batch script's too),
  # then the jobs themselves: no KillWait to sit through.
  scancel --full --signal=KILL "${jobs[@]}" 2>/dev/null || true
  scancel "${jobs[@]}" 2>/dev/null || true
  for _ in $(seq 1 300); do
    [[ -z $(squeue --noheader --format=%i 2>/dev/null || true) ]] && return 0
    sleep 0.1
  done
  echo "stop_cluster.sh: jobs still listed after 30 s: ${jobs[*]}" >&2
}

if [[ -d $dir ]]; then
  if [[ -s $dir/slurmctld.pid ]] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
    cancel_jobs
  fi
  stop "$dir/slurmd.pid"
  stop "$dir/slurmctld.pid"
  stop "$dir/munge/munged.pid"
  if ((purge)); then rm -rf "$dir"; fi
fi
echo "Slurm cluster in $dir stopped." >&2
