#!/usr/bin/env bash
# What a bounded lag costs in steps: steps to a target with and without --max-lag, each mix,
# at several sizes and seeds, on the host under mpiexec (lab/records/tta.md, "A bounded
# lag, settled"). Real training (digits MLP), an evaluation every step; bench tta settles
# each step's frames (delivered, mixed by the next steps), so the lag's late frames act.
#
#   bash lab/tta_lag.sh [OUTDIR]        # default tta-lag/
#
# Environment: SIZES ("2 4 8"), SEEDS ("0 1"), TARGET (0.95), STEPS (200), CONTENDERS
# (gossip,gossip:max-lag=2,gossip:mix=grad,gossip:mix=grad:max-lag=2). OUT/steps.md: the
# table. Results under a lag depend on timing (which frames arrived when): a busy host
# changes them.
source "$(dirname "$0")/study.sh" tta-lag "$@"
SIZES=${SIZES:-2 4 8}
SEEDS=${SEEDS:-0 1}
TARGET=${TARGET:-0.95}
STEPS=${STEPS:-200}
CONTENDERS=${CONTENDERS:-gossip,gossip:max-lag=2,gossip:mix=grad,gossip:mix=grad:max-lag=2}
BIN="$(dirname "$(command -v "$PY")")"

for seed in $SEEDS; do
    for n in $SIZES; do
        echo "start seed $seed n $n $(date +%T) $(uptime)" >> "$OUT/load.txt"
        "$BIN/mpiexec" -n "$n" gossipgrad bench tta --strategies "$CONTENDERS" \
            --target "$TARGET" --eval-every 1 --seed "$seed" --steps "$STEPS" \
            > "$OUT/tta-$seed-$n.json" 2> "$OUT/tta-$seed-$n.log"
    done
done
"$PY" - "$OUT" "$CONTENDERS" "$SEEDS" "$SIZES" > "$OUT/steps.md" <<'PY'
import json, sys
out, names, seeds, sizes = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(), sys.argv[4].split()
print("| contender | " + " | ".join(f"seed {s}: " + " / ".join(sizes) + " ranks" for s in seeds) + " | mean |")
print("|---|" + "---|" * (len(seeds) + 1))
for name in names:
    cells, every = [], []
    for s in seeds:
        steps = [json.load(open(f"{out}/tta-{s}-{n}.json"))["results"][name]["steps_to_target"] for n in sizes]
        every += [x for x in steps if x is not None]
        cells.append(" / ".join(str(x) for x in steps))
    mean = f"{sum(every) / len(every):.1f}" if every else "-"
    print(f"| {name} | " + " | ".join(cells) + f" | {mean} |")
PY
cat "$OUT/steps.md"
