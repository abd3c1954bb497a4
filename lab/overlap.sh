#!/usr/bin/env bash
# Issue 44 (the exchange in flight during backward and forward): contenders side by side on
# the stand-in cluster, one `bench strategies` launch per link rate.
#
#   flock /tmp/gg-quiet.lock bash lab/overlap.sh [OUTDIR]     # default overlap/; root
#
# N stand-in ranks of PROFILE at K = DILATE behind links of each RATE (200mbit x 10 stands
# for 2 Gbit/s, 1gbit x 10 for 10 Gbit/s), one contender at a time (--together one).
# Environment: N (8), PROFILE (googlenet), DILATE (10), RATES (200mbit), STEPS (2), REPS (2),
# CONTENDERS (gossip,gossip:timing=early,ddp,local), TAG (a name for the files), EXTRA
# (more flags for bench strategies).
source "$(dirname "$0")/study.sh" overlap "$@"
N=${N:-8}
PROFILE=${PROFILE:-googlenet}
DILATE=${DILATE:-10}
RATES=${RATES:-200mbit}
STEPS=${STEPS:-2}
REPS=${REPS:-2}
CONTENDERS=${CONTENDERS:-gossip,gossip:timing=early,ddp,local}
TAG=${TAG:-run}
EXTRA=${EXTRA:-}
EMU=("$PY" scripts/emucluster.py)

"${EMU[@]}" cleanup > /dev/null 2>&1 || true
trap '"${EMU[@]}" cleanup > /dev/null 2>&1 || true' EXIT
for rate in $RATES; do
    name="$TAG-$PROFILE-$N-$rate"
    echo "$name before: $(uptime)" | tee -a "$OUT/load.txt"
    # shellcheck disable=SC2086
    "${EMU[@]}" run -n "$N" --rate "$rate" -- gossipgrad bench strategies \
        --device "standin:$PROFILE" --dilate "$DILATE" --strategies "$CONTENDERS" \
        --steps "$STEPS" --reps "$REPS" --warmup 1 --together one --comm-timeout 300 $EXTRA \
        > "$OUT/$name.json" 2> "$OUT/$name.log"
    echo "$name after: $(uptime)" | tee -a "$OUT/load.txt"
done
