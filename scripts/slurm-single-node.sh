#!/usr/bin/env bash
# A single-node Slurm on this machine, for `archlab ablate --executor slurm` and its test (tests/lab/test_slurm.py):
# installs munge, slurmctld, slurmd and the client commands (Debian / Ubuntu packages, as root), writes a minimal
# slurm.conf with this host as the controller and the one compute node, starts munged, slurmctld and slurmd
# (as plain daemons: no systemd needed, as in a container or a CI machine), and waits until the node is idle.
#
#   sudo scripts/slurm-single-node.sh            # install if needed, configure, start; idempotent
#   sudo scripts/slurm-single-node.sh --no-install
#   sudo scripts/slurm-single-node.sh --stop     # stop the three daemons
#
# The configuration keeps to what any kernel offers: process tracking by /proc (proctrack/linuxproc), no task
# binding and no cgroups (task/none), no accounting, consumable cores (select/cons_tres). It prints one line per
# step and ends with `sinfo`; on failure it prints the daemon's log tail and exits non-zero.
set -euo pipefail

INSTALL=1
case "${1:-}" in
    --no-install) INSTALL=0 ;;
    --stop)  # by the pids the daemons recorded, never by name
        for pidfile in /run/slurmd.pid /run/slurmctld.pid /run/munge/munged.pid; do
            [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
        done
        echo "slurm-single-node: stopped slurmd, slurmctld, munged"
        exit 0 ;;
    "") ;;
    *) echo "usage: $0 [--no-install | --stop]" >&2; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
    echo "slurm-single-node: needs root (it installs packages and starts daemons)" >&2
    exit 2
fi

if [ "$INSTALL" = 1 ] && ! command -v slurmd >/dev/null 2>&1; then
    echo "slurm-single-node: installing munge, slurmctld, slurmd, slurm-client"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q munge slurmctld slurmd slurm-client
fi
for tool in munged slurmctld slurmd sbatch sinfo scontrol; do
    command -v "$tool" >/dev/null 2>&1 || { echo "slurm-single-node: $tool is not installed" >&2; exit 1; }
done

HOST="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
CONF_DIR=/etc/slurm
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
mkdir -p "$CONF_DIR" "$STATE" "$SPOOL" "$LOGS" /run/munge /var/lib/munge /var/log/munge
chown slurm:slurm "$STATE" "$LOGS" 2>/dev/null || true

# munge: one key shared by controller and node (the same host here)
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || \
        dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge /var/lib/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge

cat > "$CONF_DIR/slurm.conf" <<EOF
# written by scripts/slurm-single-node.sh: one host, controller and compute node
ClusterName=archlab
SlurmctldHost=$HOST
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
KillWait=10
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
echo "slurm-single-node: wrote $CONF_DIR/slurm.conf (node $HOST, $CPUS CPUs, $MEM_MB MB)"

fail() {
    echo "slurm-single-node: $1" >&2
    for log in "$LOGS/slurmctld.log" "$LOGS/slurmd.log" /var/log/munge/munged.log; do
        [ -f "$log" ] && { echo "--- $log" >&2; tail -n 15 "$log" >&2; }
    done
    exit 1
}

pgrep -x munged >/dev/null || runuser -u munge -- munged || fail "munged did not start"
munge -n | unmunge >/dev/null 2>&1 || fail "munge cannot encode and decode a credential"
echo "slurm-single-node: munged is running"
pgrep -x slurmctld >/dev/null || slurmctld || fail "slurmctld did not start"
pgrep -x slurmd >/dev/null || slurmd || fail "slurmd did not start"
echo "slurm-single-node: slurmctld and slurmd started"

for _ in $(seq 1 60); do
    state="$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)"
    case "$state" in
        idle|mixed|allocated) break ;;
        down*|drain*) scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
state="$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)"
case "$state" in
    idle|mixed|allocated) ;;
    *) fail "node $HOST is '${state:-unknown}' after 60 s, not idle" ;;
esac
sinfo
echo "slurm-single-node: ready (sbatch / srun / squeue on partition debug)"
