#!/usr/bin/env bash
# Bucket size on the stand-in cluster (issue 22: "defaults chosen on this CPU-bound host may
# be wrong for clusters: choose them on the stand-in"), and why Horovod hides its wire time
# there (lab/records/standin-heldout.md, "Bucket size on the stand-in cluster"; the
# planner's scoring of this launch is the command printed there).
#
#   bash lab/standin_buckets.sh [OUTDIR]        # default standin-buckets/; root
#
# One launch of 8 stand-in ranks (PROFILE, K = DILATE, links RATE: 1gbit x 10 stands for
# 10 Gbit/s) with gossip, allreduce and DDP at 1, 4 and 25 MiB buckets, Horovod and local;
# then Horovod alone with HOROVOD_CYCLE_TIME=CYCLE_MS (its fusion waits that long, so it
# fuses what a bucket would), to test the explanation that Horovod's short cycle (a few
# milliseconds by default) sends gradients nearly as they become ready.
# Environment: N (8), PROFILE (googlenet), DILATE (10), RATE (1gbit), STEPS (2), REPS (2),
# CYCLE_MS (200).
source "$(dirname "$0")/study.sh" standin-buckets "$@"
N=${N:-8}
PROFILE=${PROFILE:-googlenet}
DILATE=${DILATE:-10}
RATE=${RATE:-1gbit}
STEPS=${STEPS:-2}
REPS=${REPS:-2}
CYCLE_MS=${CYCLE_MS:-200}
EMU=("$PY" scripts/emucluster.py)
SIZES_MB="1 4 25"
contenders=""
for s in gossip allreduce ddp; do
    for mb in $SIZES_MB; do contenders+="$s:bucket-mb=$mb,"; done
done
contenders+="horovod,local"

"${EMU[@]}" cleanup > /dev/null 2>&1 || true
trap '"${EMU[@]}" cleanup > /dev/null 2>&1 || true' EXIT
bench=(gossipgrad bench strategies --device "standin:$PROFILE" --dilate "$DILATE" --steps "$STEPS"
    --reps "$REPS" --warmup 1 --together one --comm-timeout 300)
echo "buckets: $(uptime)" | tee -a "$OUT/load.txt"
"${EMU[@]}" run -n "$N" --rate "$RATE" -- "${bench[@]}" --strategies "$contenders" \
    > "$OUT/buckets.json" 2> "$OUT/buckets.log"
echo "horovod cycle $CYCLE_MS ms: $(uptime)" | tee -a "$OUT/load.txt"
HOROVOD_CYCLE_TIME=$CYCLE_MS "${EMU[@]}" run -n "$N" --rate "$RATE" -- "${bench[@]}" \
    --strategies horovod,local > "$OUT/horovod-cycle.json" 2> "$OUT/horovod-cycle.log"
