#!/usr/bin/env bash
# Stop the single-node test cluster started by scripts/slurm-up.sh.
#
#   scripts/slurm-down.sh            # stop slurmd, slurmctld and munged
#   scripts/slurm-down.sh --purge    # also forget saved job/node state (fresh start)
#
# Only the daemons named in the pid files slurm-up.sh configured are signalled.
# Packages, the munge key and slurm.conf stay, so the next slurm-up.sh is quick.
set -euo pipefail

purge=0
case "${1:-}" in
    "") ;;
    --purge) purge=1 ;;
    *) printf 'usage: %s [--purge]\n' "$0" >&2; exit 2 ;;
esac

say() { printf 'slurm-down: %s\n' "$*" >&2; }

# stop PIDFILE COMM: SIGTERM the process if it is still COMM, wait up to 10 s, then SIGKILL.
stop() {
    local pidfile="$1" name="$2" pid
    [[ -r "$pidfile" ]] || return 0
    pid="$(<"$pidfile")"
    if ! [[ "$pid" =~ ^[0-9]+$ ]] || [[ "$(ps -o comm= -p "$pid" 2>/dev/null)" != "$name" ]]; then
        return 0 # stale pid file
    fi
    say "stopping $name (pid $pid)"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    say "$name did not exit after 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

stop /run/slurmd.pid slurmd
stop /run/slurmctld.pid slurmctld
stop /run/munge/munged.pid munged

if ((purge)); then
    say "removing saved state under /var/spool/slurmctld and /var/spool/slurmd"
    rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
fi
