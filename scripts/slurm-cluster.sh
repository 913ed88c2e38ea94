#!/usr/bin/env bash
# A one-node SLURM cluster on this machine for troupe's launcher tests: munged, slurmctld
# and slurmd from Debian's munge and slurm-wlm, every file under DIR, on the given ports,
# the node declaring 4 CPUs (config_overrides) so 4 tasks run on a 2-core machine.
#   slurm-cluster.sh start DIR CTLD_PORT SLURMD_PORT   # prints the SLURM_CONF to export
#   slurm-cluster.sh stop DIR
# Needs root (slurmd starts the tasks as their user); exits non-zero saying why otherwise.
set -euo pipefail

command=${1:?usage: slurm-cluster.sh start DIR CTLD_PORT SLURMD_PORT | stop DIR}
dir=${2:?the cluster folder}

stop() {
  for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munge/munged.pid; do
    [[ -f "$pid" ]] && kill "$(cat "$pid")" 2>/dev/null || true
  done
}

if [[ "$command" == stop ]]; then
  stop
  exit 0
fi

ctld_port=${3:?the slurmctld port}
slurmd_port=${4:?the slurmd port}
for program in munged slurmctld slurmd srun sbatch; do
  command -v "$program" >/dev/null || { echo "no $program (Debian's munge and slurm-wlm)" >&2; exit 3; }
done
[[ $(id -u) -eq 0 ]] || { echo "slurmd must run as root to start tasks" >&2; exit 3; }

mkdir -p "$dir"/state "$dir"/spool "$dir"/log "$dir"/munge
chmod 700 "$dir"/munge
[[ -f "$dir"/munge/munge.key ]] || { head -c 1024 /dev/urandom > "$dir"/munge/munge.key; chmod 600 "$dir"/munge/munge.key; }
munged --force --socket="$dir"/munge/socket --key-file="$dir"/munge/munge.key \
  --log-file="$dir"/log/munged.log --pid-file="$dir"/munge/munged.pid --seed-file="$dir"/munge/seed

cat > "$dir"/slurm.conf <<CONF
ClusterName=troupe
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=localhost CPUs=4 Sockets=1 CoresPerSocket=4 ThreadsPerCore=1 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF

export SLURM_CONF="$dir"/slurm.conf
slurmctld || { stop; echo "slurmctld did not start (see $dir/log/slurmctld.log)" >&2; exit 3; }
slurmd || { stop; echo "slurmd did not start (see $dir/log/slurmd.log)" >&2; exit 3; }
for _ in $(seq 1 40); do  # up to 20 s for the node to be idle
  if sinfo -h -o %t 2>/dev/null | grep -q '^idle'; then
    echo "$SLURM_CONF"
    exit 0
  fi
  sleep 0.5
done
stop
echo "the node did not become idle within 20 s: $(sinfo -h -o %t 2>&1)" >&2
exit 3
