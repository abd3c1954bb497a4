#!/usr/bin/env bash
# The simulator's clock against real launches on the emulated cluster (docs/scale.md;
# issue 41 item 4): 8 ranks, each in its own network namespace behind a 100 Mbit/s link
# (scripts/emucluster.py: root; the namespaces are removed on exit), a stand-in accelerator
# whose compute is the waits of a measured MLP profile x 5 (so the 2-core host's load does
# not time the compute), allreduce, lockstep gossip and --max-lag 2, with and without rank
# 7 twice as slow (GOSSIPGRAD_INJECT_SLOW=7:2). Then python -m lab scale-clock-check.
#
#   bash lab/scale_clock_check.sh [OUTDIR]     # default lab/records/scale/clock-check
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-lab/records/scale/clock-check}
mkdir -p "$OUT"
BENCH=(python -m gossipgrad bench strategies --device "standin:$OUT/mlp1024.json" --dilate 5
       --strategies allreduce,gossip,gossip:max-lag=2 --steps 20 --reps 3 --warmup 1)
gossipgrad profile -a mlp --hidden 1024 -b 64 --threads 1 --layers --out "$OUT/mlp1024.json"
python scripts/emucluster.py run -n 8 --rate 100mbit -- python -m gossipgrad netfit \
    --stat min --max-mb 16 --out "$OUT/net-100mbit.json" 2> "$OUT/netfit.log"
python scripts/emucluster.py run -n 8 --rate 100mbit -- "${BENCH[@]}" \
    > "$OUT/bench-none.json" 2> "$OUT/bench-none.log"
GOSSIPGRAD_INJECT_SLOW=7:2 python scripts/emucluster.py run -n 8 --rate 100mbit -- \
    "${BENCH[@]}" > "$OUT/bench-slow7x2.json" 2> "$OUT/bench-slow7x2.log"
ip netns list | grep -q '^gg' && echo "namespaces left over: run scripts/emucluster.py cleanup"
python -m lab scale-clock-check "$OUT" > "$OUT/check.json"
