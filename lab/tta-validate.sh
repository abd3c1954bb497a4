#!/usr/bin/env bash
# Time to accuracy side by side at 8 ranks on the emulated 1 Gbit/s cluster, and the
# planner's steps-to-target prediction for size 8 from runs at sizes 1, 2 and 4 (the size-8
# runs are shown next to it, never fitted). Writes everything to OUT (default tta-out/).
#
#   bash lab/tta-validate.sh [OUT]      # needs root (network namespaces)
#
# Steps to the target do not depend on the link or the load (same seed, same size: same
# run), so sizes 1, 2 and 4 run on the host; seconds do, so size 8 runs on the emulated
# cluster, every strategy in one launch. Horovod stops at --time-limit training seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-tta-out}
mkdir -p "$OUT"
BIN="$(dirname "$(command -v python)")"
JOB=(--target 0.9 --steps 200 --eval-every 2)  # the bench's job defaults: mlp 2048, batch 16
EMU=(python scripts/emucluster.py run --rate 1gbit)

gossipgrad bench tta --strategies gossip,allreduce "${JOB[@]}" \
    --metrics-out "$OUT/tta-1.jsonl" > "$OUT/tta-1.json"
for n in 2 4; do
    "$BIN/mpiexec" -n "$n" gossipgrad bench tta --strategies gossip,allreduce,ddp,local \
        "${JOB[@]}" --metrics-out "$OUT/tta-$n.jsonl" > "$OUT/tta-$n.json"
done
"${EMU[@]}" -n 8 -- gossipgrad bench tta --strategies gossip,allreduce,ddp,horovod,local \
    "${JOB[@]}" --time-limit 600 --metrics-out "$OUT/tta-8.jsonl" \
    --markdown "$OUT/tta-8.md" --png "$OUT/tta-8.png" > "$OUT/tta-8.json"

gossipgrad profile -a mlp --hidden 2048 -b 16 --out "$OUT/profile.json"
"${EMU[@]}" -n 2 -- gossipgrad netfit --out "$OUT/network.json"
gossipgrad plan --profile "$OUT/profile.json" --network "$OUT/network.json" --sizes 8 \
    --strategies gossip,allreduce --staleness 0 --ranks-per-host 8 --target-accuracy 0.9 \
    --metrics "$OUT/tta-1.jsonl,$OUT/tta-2.jsonl,$OUT/tta-4.jsonl,$OUT/tta-8.jsonl" \
    --out "$OUT/plan-8.md"
cat "$OUT/tta-8.md" "$OUT/plan-8.md"
