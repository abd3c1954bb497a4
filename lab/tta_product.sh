#!/usr/bin/env bash
# Time to accuracy as steps x step time, validated against a direct measurement (issue 22,
# item 4; lab/records/tta.md, "Steps x step time"). On a quiet machine, as root.
#
#   bash lab/tta_product.sh [OUTDIR]        # default tta-product/
#
# Statistical efficiency: `bench tta` at sizes 1, 2 and 4 on the host (steps do not depend on
# the link or the load for lockstep contenders: same seed, same size, same run), a target
# near the final accuracy and an evaluation every step, so that steps to target differ.
# Hardware efficiency: a short `bench tta` launch at 8 ranks on the emulated cluster (its
# mean training step per contender). The prediction for 8 ranks (steps fitted on 1, 2, 4 x
# the short launch's step) is then set against a separate, full launch at 8 ranks on the
# same emulated cluster, which enters no fit. With STEPS_FROM (launch directories of other
# seeds, space-separated) the full launch is scored a second time with the steps at 8 ranks
# taken from those launches (their mean) x this launch's short step: score-steps-from.json.
# The mean over several seeds' launches, scored as one: `python -m lab tta-product DIR1 DIR2
# ... --steps-from OTHER ...` (lab/records/tta.md, "The mean of three fresh seeds").
# Environment: RATE (1gbit), TARGET (0.95), STEPS (200), SHORT (24), CONTENDERS
# (gossip,allreduce,ps,gossip:max-lag=2,ddp), SEED (0), STEPS_FROM (none).
source "$(dirname "$0")/study.sh" tta-product "$@"
RATE=${RATE:-1gbit}
TARGET=${TARGET:-0.95}
STEPS=${STEPS:-200}
SHORT=${SHORT:-24}
CONTENDERS=${CONTENDERS:-gossip,allreduce,ps,gossip:max-lag=2,ddp}
SEED=${SEED:-0}
BIN="$(dirname "$(command -v "$PY")")"
EMU=("$PY" scripts/emucluster.py)
JOB=(--target "$TARGET" --eval-every 1 --seed "$SEED")

"${EMU[@]}" cleanup > /dev/null 2>&1 || true
trap '"${EMU[@]}" cleanup > /dev/null 2>&1 || true' EXIT

# ps needs two ranks (a server and a worker); local trains no shared model.
gossipgrad bench tta --strategies gossip,allreduce "${JOB[@]}" --steps "$STEPS" \
    --metrics-out "$OUT/tta-1.jsonl" > "$OUT/tta-1.json" 2> "$OUT/tta-1.log"
for n in 2 4; do
    "$BIN/mpiexec" -n "$n" gossipgrad bench tta --strategies "$CONTENDERS" "${JOB[@]}" \
        --steps "$STEPS" --metrics-out "$OUT/tta-$n.jsonl" > "$OUT/tta-$n.json" \
        2> "$OUT/tta-$n.log"
done
echo "short: $(uptime)" | tee -a "$OUT/load.txt"
"${EMU[@]}" run -n 8 --rate "$RATE" -- gossipgrad bench tta --strategies "$CONTENDERS" \
    --target 1.0 --steps "$SHORT" --eval-every "$SHORT" --seed "$SEED" > "$OUT/step-8.json" \
    2> "$OUT/step-8.log"
echo "full: $(uptime)" | tee -a "$OUT/load.txt"
"${EMU[@]}" run -n 8 --rate "$RATE" -- gossipgrad bench tta --strategies "$CONTENDERS" \
    "${JOB[@]}" --steps "$STEPS" --stop-at-target --metrics-out "$OUT/tta-8.jsonl" \
    --markdown "$OUT/tta-8.md" > "$OUT/tta-8.json" 2> "$OUT/tta-8.log"

# The prediction reads sizes 1, 2, 4 and the short launch only; the full launch is scored.
gossipgrad profile -a mlp --hidden 2048 -b 16 --out "$OUT/profile.json" 2> /dev/null
"${EMU[@]}" run -n 2 --rate "$RATE" -- gossipgrad netfit --out "$OUT/network.json" \
    > /dev/null 2> "$OUT/network.log"
gossipgrad plan --profile "$OUT/profile.json" --network "$OUT/network.json" --sizes 8 --strategies gossip,allreduce \
    --target-accuracy "$TARGET" --step-times "$OUT/step-8.json" \
    --metrics "$OUT/tta-1.jsonl,$OUT/tta-2.jsonl,$OUT/tta-4.jsonl" --out "$OUT/plan-8.md"
"$PY" -m lab tta-product "$OUT" --markdown "$OUT/score.md" | tee "$OUT/score.json"
if [ -n "${STEPS_FROM:-}" ]; then
    from=()
    for d in $STEPS_FROM; do from+=(--steps-from "$d"); done
    "$PY" -m lab tta-product "$OUT" "${from[@]}" --markdown "$OUT/score-steps-from.md" \
        | tee "$OUT/score-steps-from.json"
fi
