#!/usr/bin/env bash
# The planner held out on the stand-in cluster (issue 22; lab/records/standin-heldout.md):
# every launch, in order, on a quiet machine (no other jobs: check `uptime` first).
#
#   bash lab/standin_heldout.sh [OUTDIR]        # default standin-heldout/
#
# Root is needed (scripts/emucluster.py: one network namespace per rank). Per (size, link
# rate): one netfit of the emulated links and one `bench strategies` launch of every
# contender on the stand-in GoogLeNet (K = 10: 1 Gbit/s and 2.5 Gbit/s stand for 10 and
# 25 Gbit/s). The last step calibrates on sizes 2 and 4 at 1gbit and scores every other
# launch (8 ranks at 1gbit, every size at 2500mbit), which never enters a fit. Contenders run
# one at a time (--together one): 8 ranks x 6 GoogLeNet copies would not fit in 24 GiB.
# Environment: SIZES (default "2 4 8"), RATES ("1gbit 2500mbit"), PROFILE (googlenet),
# DILATE (10), CONTENDERS (gossip,allreduce,ps,ddp,horovod,local), STEPS (2), REPS (3).
source "$(dirname "$0")/study.sh" standin-heldout "$@"
SIZES=${SIZES:-2 4 8}
RATES=${RATES:-1gbit 2500mbit}
PROFILE=${PROFILE:-googlenet}
DILATE=${DILATE:-10}
CONTENDERS=${CONTENDERS:-gossip,allreduce,ps,ddp,horovod,local}
STEPS=${STEPS:-2}
REPS=${REPS:-3}
EMU=("$PY" scripts/emucluster.py)

"${EMU[@]}" cleanup > /dev/null 2>&1 || true
trap '"${EMU[@]}" cleanup > /dev/null 2>&1 || true' EXIT

# One stand-in rank, no link: the base of every launch's scaling efficiency.
gossipgrad bench strategies --device "standin:$PROFILE" --dilate "$DILATE" --strategies local \
    --steps "$STEPS" --reps "$REPS" --warmup 1 > "$OUT/run-$PROFILE-1-host.json" \
    2> "$OUT/run-$PROFILE-1-host.log"

for rate in $RATES; do
    for n in $SIZES; do
        name="$PROFILE-$n-$rate"
        echo "$name: $(uptime)" | tee -a "$OUT/load.txt"
        "${EMU[@]}" run -n "$n" --rate "$rate" -- gossipgrad netfit \
            --out "$OUT/net-$n-$rate.json" 2> "$OUT/net-$n-$rate.log" > /dev/null
        /usr/bin/time -v "${EMU[@]}" run -n "$n" --rate "$rate" -- gossipgrad bench strategies \
            --device "standin:$PROFILE" --dilate "$DILATE" --strategies "$CONTENDERS" \
            --steps "$STEPS" --reps "$REPS" --warmup 1 --together one --comm-timeout 300 \
            > "$OUT/run-$name.json" 2> "$OUT/run-$name.log"
    done
done

args=()
for f in "$OUT"/run-*.json; do args+=(--standin-runs "$f"); done
for f in "$OUT"/net-*.json; do args+=(--networks "$f"); done
if ! ls "$OUT"/run-*-2-1gbit.json "$OUT"/run-*-4-1gbit.json > /dev/null 2>&1; then
    # not launched here (SIZES=8): calibrate on the stored GoogLeNet launches, as the docs do
    H=lab/records/data/standin-heldout
    for n in 2 4; do
        args+=(--standin-runs "$H/run-googlenet-$n-1gbit.json" --networks "$H/net-$n-1gbit.json")
    done
    [ -e "$OUT/run-googlenet-1-host.json" ] || args+=(--standin-runs "$H/run-googlenet-1-host.json")
    args+=(--refit-networks)
fi
"$PY" -m lab plan-validate "${args[@]}" --calibrate-sizes 2,4 --calibrate-rate 1gbit \
    --out "$OUT/heldout.json" > /dev/null
