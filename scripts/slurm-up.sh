#!/usr/bin/env bash
# Bring up a real, single-node Slurm cluster on this host, for tests and CI.
#
#   sudo scripts/slurm-up.sh          # idempotent; ~0.2 s when already up
#   scripts/slurm-down.sh             # stop the daemons again
#
# What it does, each step skipped when already done:
#   1. apt-get install slurm-wlm + munge (apt-get update only when there is no candidate);
#   2. munge key, /run/munge, `munged` running as user munge;
#   3. writes /etc/slurm/slurm.conf: one node = this host with its real CPUs and memory,
#      one default partition, no cgroups (proctrack/linuxproc, task/none), MpiDefault=pmi2,
#      select/cons_tres with CR_CPU so 1-CPU tasks pack, OverSubscribe=FORCE so CPUs can
#      be shared when jobs ask for more than the node has free;
#   4. starts slurmctld and slurmd as root and waits (SLURM_UP_TIMEOUT, default 60 s)
#      until `sinfo` reports the node usable, resuming it if it is down or drained.
# On failure it prints the daemons' logs and exits non-zero.
#
# Must run as root. Environment: SLURM_UP_TIMEOUT (seconds, default 60).
set -euo pipefail

readonly CONF_DIR=/etc/slurm
readonly CONF="$CONF_DIR/slurm.conf"
readonly LOG_DIR=/var/log/slurm
readonly CTLD_LOG="$LOG_DIR/slurmctld.log"
readonly SLURMD_LOG="$LOG_DIR/slurmd.log"
readonly CTLD_PID=/run/slurmctld.pid
readonly SLURMD_PID=/run/slurmd.pid
readonly MUNGE_PID=/run/munge/munged.pid
readonly TIMEOUT="${SLURM_UP_TIMEOUT:-60}"
HOST="$(hostname -s)"
readonly HOST

say() { printf 'slurm-up: %s\n' "$*" >&2; }

dump_logs() {
    local f
    for f in "$CTLD_LOG" "$SLURMD_LOG" /var/log/munge/munged.log; do
        if [[ -f "$f" ]]; then
            printf '\n===== last 40 lines of %s =====\n' "$f" >&2
            tail -n 40 "$f" >&2
        fi
    done
}

die() {
    say "ERROR: $*"
    dump_logs
    exit 1
}

# True when the process whose id is in pidfile $1 is alive and is command $2.
pid_alive() {
    local pid
    [[ -r "$1" ]] || return 1
    pid="$(<"$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" == "$2" ]]
}

# Node state as sinfo reports it (idle, mixed, down*, drained, ...), empty if unreachable.
node_state() {
    sinfo --noheader --nodes="$HOST" --format=%T 2>/dev/null | head -n 1 || true
}

node_usable() {
    case "$(node_state)" in
        idle | mixed | allocated | completing) return 0 ;;
        *) return 1 ;;
    esac
}

[[ "$(id -u)" == 0 ]] || { say "ERROR: must run as root (it installs packages and starts daemons)"; exit 1; }

# ---------------------------------------------------------------- 1. packages
install_packages() {
    command -v slurmctld >/dev/null && command -v munged >/dev/null && return 0
    export DEBIAN_FRONTEND=noninteractive
    # The image may ship package lists already; refresh them only if slurm is unknown.
    # (Capture first: `apt-cache ... | grep -q` under pipefail fails on SIGPIPE.)
    local policy
    policy="$(apt-cache policy slurm-wlm 2>/dev/null || true)"
    if [[ "$policy" != *"Candidate: "[0-9]* ]]; then
        say "apt-get update"
        apt-get update -q
    fi
    say "installing slurm-wlm and munge"
    apt-get install -y -q --no-install-recommends slurm-wlm munge \
        || die "apt-get install slurm-wlm munge failed"
}

# ---------------------------------------------------------------- 2. munge
start_munge() {
    if [[ ! -s /etc/munge/munge.key ]]; then
        say "creating munge key"
        mkdir -p /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile=/etc/munge/munge.key --force
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge

    if pid_alive "$MUNGE_PID" munged && munge -n </dev/null | unmunge >/dev/null 2>&1; then
        return 0
    fi
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged --force \
        || die "munged did not start"
    local deadline=$((SECONDS + 10))
    until munge -n </dev/null | unmunge >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "munged started but 'munge -n | unmunge' fails"
        sleep 0.2
    done
}

# ---------------------------------------------------------------- 3. slurm.conf
# Prints the config for this host. `slurmd -C` reports the real hardware line
# (CPUs, sockets, cores, threads, RealMemory), so the node never fails registration
# for claiming more than it has.
render_conf() {
    local hw
    hw="$(slurmd -C | head -n 1)"
    [[ "$hw" == NodeName=* ]] || die "unexpected 'slurmd -C' output: $hw"
    cat <<EOF
# Written by gossipgrad scripts/slurm-up.sh -- single-node test cluster. Do not edit.
ClusterName=gossipgrad
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: containers and CI runners rarely let us manage them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=pmi2
# Pack single-CPU tasks; let jobs share CPUs rather than pend forever on a small node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
# Keep finished jobs visible to 'scontrol show job' for an hour (there is no sacct DB).
MinJobAge=3600
KillWait=10
# Short timeouts so a broken node is reported quickly.
SlurmctldTimeout=30
SlurmdTimeout=30
$hw NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

# Writes the config if it changed; prints "changed" or "same".
write_conf() {
    local new
    new="$(render_conf)"
    mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd
    if [[ -f "$CONF" ]] && [[ "$(<"$CONF")" == "$new" ]]; then
        echo same
        return 0
    fi
    printf '%s\n' "$new" >"$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
    echo changed
}

# ---------------------------------------------------------------- 4. daemons
stop_pidfile() {
    local pidfile="$1" name="$2" pid
    pid_alive "$pidfile" "$name" || return 0
    pid="$(<"$pidfile")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

start_slurm() {
    local conf_state="$1"
    if [[ "$conf_state" == changed ]]; then
        say "slurm.conf changed; (re)starting daemons"
        stop_pidfile "$SLURMD_PID" slurmd
        stop_pidfile "$CTLD_PID" slurmctld
    fi
    if ! pid_alive "$CTLD_PID" slurmctld; then
        say "starting slurmctld"
        slurmctld || die "slurmctld did not start"
    fi
    if ! pid_alive "$SLURMD_PID" slurmd; then
        say "starting slurmd"
        slurmd || die "slurmd did not start"
    fi
}

wait_for_node() {
    local deadline=$((SECONDS + TIMEOUT)) state
    while :; do
        state="$(node_state)"
        case "$state" in
            idle | mixed | allocated | completing) return 0 ;;
            down* | drain* | fail*)
                # A restarted slurmd is often marked down ("unexpectedly rebooted").
                scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true ;;
        esac
        pid_alive "$CTLD_PID" slurmctld || die "slurmctld exited"
        pid_alive "$SLURMD_PID" slurmd || die "slurmd exited"
        ((SECONDS < deadline)) || die "node $HOST not usable after ${TIMEOUT}s (state: '${state:-no answer from slurmctld}')"
        sleep 0.5
    done
}

main() {
    # Fast path: daemons up, config current, node usable.
    if command -v slurmctld >/dev/null && pid_alive "$CTLD_PID" slurmctld \
        && pid_alive "$SLURMD_PID" slurmd && pid_alive "$MUNGE_PID" munged \
        && [[ -f "$CONF" ]] && [[ "$(<"$CONF")" == "$(render_conf)" ]] && node_usable; then
        say "already up (node $HOST: $(node_state))"
        return 0
    fi
    install_packages
    start_munge
    start_slurm "$(write_conf)"
    wait_for_node
    say "up: node $HOST is $(node_state) ($(sinfo --noheader --nodes="$HOST" --format='%c CPUs, %m MB'))"
}

main "$@"
