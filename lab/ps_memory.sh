#!/usr/bin/env bash
# The memory of --strategy ps's owners, per push pool (GOSSIPGRAD_PS_PUSH_POOL_MB): each
# rank's peak resident memory (VmHWM, read every 0.2 s) in one short stand-in launch on
# this host (no emulated links: memory does not depend on them).
#
#   bash lab/ps_memory.sh [OUTDIR]        # default ps-memory/
#
# Environment: N (ranks, default 4), PROFILE (vgg16), POOLS ("100000 256": every push at
# once, then the default), BUCKET_MB (1000: buckets of 1/N of the model, the pool then
# matters), STEPS (2). Prints one JSON line per pool; OUT/ps-memory-*.json.
source "$(dirname "$0")/study.sh" ps-memory "$@"
N=${N:-4}
PROFILE=${PROFILE:-vgg16}
POOLS=${POOLS:-100000 256}
STEPS=${STEPS:-2}
BUCKET_MB=${BUCKET_MB:-1000}

for pool in $POOLS; do
    GOSSIPGRAD_PS_PUSH_POOL_MB=$pool mpiexec -n "$N" gossipgrad bench strategies \
        --device "standin:$PROFILE" --dilate 1 --strategies ps --steps "$STEPS" --reps 1 \
        --warmup 0 --bucket-mb "$BUCKET_MB" > "$OUT/bench-$pool.json" 2> "$OUT/bench-$pool.log" &
    launch=$!
    "$PY" - "$launch" "$pool" "$N" "$PROFILE" "$BUCKET_MB" > "$OUT/ps-memory-$pool.json" <<'PYEOF'
import json, os, sys, time

launch, pool, n, profile = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bucket_mb = float(sys.argv[5])
peak: dict[int, int] = {}  # pid -> VmHWM in kB


def ranks() -> list[int]:
    """The ranks' processes: gossipgrad bench processes whose parent is not one (a rank's
    forked helpers share its command line)."""
    found = {}
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if any(c.endswith(b"/gossipgrad") for c in cmd) and b"strategies" in cmd:
            found[int(pid)] = ppid
    return [pid for pid, ppid in found.items() if ppid not in found]


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # exited, not yet waited for
    except OSError:
        return False


while True:
    for pid in ranks():
        try:
            with open(f"/proc/{pid}/status") as f:
                hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM"))
        except (OSError, StopIteration):
            continue
        peak[pid] = max(peak.get(pid, 0), hwm)
    if not alive(launch):
        break
    time.sleep(0.2)
mb = sorted((round(v / 1024) for v in peak.values()), reverse=True)
print(json.dumps({"pool_mb": pool, "size": n, "profile": profile, "bucket_mb": bucket_mb,
                  "peak_rss_mb": mb,
                  "max_mb": max(mb, default=0), "sum_mb": sum(mb)}))
PYEOF
    wait "$launch"
    cat "$OUT/ps-memory-$pool.json"
done
