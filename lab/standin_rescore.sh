#!/usr/bin/env bash
# Score every stored stand-in launch again with today's planner (issue 22;
# lab/records/standin-heldout.md): no MPI, no launch, about a minute.
#
#   bash lab/standin_rescore.sh [OUTDIR]        # default standin-rescore/
#
# Every scoring calibrates on the GoogLeNet launches at 2 and 4 ranks on 1gbit (10 Gbit/s
# stood for) and predict the rest, never fitted: OUTDIR/googlenet-all.json holds every
# GoogLeNet launch at 8 ranks (1 to 25 Gbit/s stood for) and at 2 and 4 ranks on 2500mbit;
# OUTDIR/resnet50-all.json every ResNet-50 launch at 8 ranks (a model the calibration never
# saw); OUTDIR/clockfix-all.json the 8-rank launches of both made after the stand-in's clock
# fix; OUTDIR/inflight-all.json those whose netfits also hold the allreduce sweep with 4 in
# flight; OUTDIR/codecs-all.json the wire-codec launches; OUTDIR/vgg16-*.json each VGG-16
# launch (never calibrated on; vgg16-ps-*: ps before and after splitting large parameters).
# The netfit documents are refitted from the times they recorded (--refit-networks).
source "$(dirname "$0")/study.sh" standin-rescore "$@"
D=lab/records/data
H=$D/standin-heldout
R=$D/standin-resnet50
cal=(--calibrate-sizes 2,4 --calibrate-rate 1gbit --refit-networks)

runs=() nets=()
for f in $H/run-*.json $D/standin-link/run-googlenet-8-100mbit.json \
    $D/standin-fresh/run-googlenet-8-*.json $D/standin-blind*/run-googlenet-8-*.json; do
    runs+=(--standin-runs "$f")
done
for f in $H/net-*.json $D/standin-link/net-*.json $D/standin-fresh/net-*.json \
    $D/standin-blind*/net-*.json; do
    nets+=(--networks "$f")
done
"$PY" -m lab plan-validate "${runs[@]}" "${nets[@]}" "${cal[@]}" \
    --out "$OUT/googlenet-all.json" > /dev/null
# Every later call has the same calibration launches: it takes this fit, frozen.
cal+=(--standin-calibration "$OUT/googlenet-all.json")

runs=(--standin-runs $H/run-googlenet-1-host.json --standin-runs $H/run-googlenet-2-1gbit.json
    --standin-runs $H/run-googlenet-4-1gbit.json --standin-runs $R/run-resnet50-1-host.json)
nets=(--networks $H/net-2-1gbit.json --networks $H/net-4-1gbit.json)
for f in $R/run-resnet50-8-*.json; do runs+=(--standin-runs "$f"); done
for f in $R/net-8-*.json; do nets+=(--networks "$f"); done
"$PY" -m lab plan-validate "${runs[@]}" "${nets[@]}" "${cal[@]}" \
    --out "$OUT/resnet50-all.json" > /dev/null
# The 8-rank launches in each folder under $1 that has its own netfit, both models, scored
# into $OUT/$2.json. One folder set per call: a network is looked up by (size, rate), so
# launches at the same rate from different days must not share a call.
score_launches() {
    local runs=(--standin-runs $H/run-googlenet-1-host.json
        --standin-runs $H/run-googlenet-2-1gbit.json --standin-runs $H/run-googlenet-4-1gbit.json
        --standin-runs $R/run-resnet50-1-host.json)
    local nets=(--networks $H/net-2-1gbit.json --networks $H/net-4-1gbit.json)
    for d in "$1"/*/; do
        ls "$d"net-*.json > /dev/null 2>&1 || continue  # a probe without its own netfit
        for f in "$d"run-*-8-*.json; do runs+=(--standin-runs "$f"); done
        for f in "$d"net-8-*.json; do nets+=(--networks "$f"); done
    done
    "$PY" -m lab plan-validate "${runs[@]}" "${nets[@]}" "${cal[@]}" --out "$OUT/$2.json" \
        > /dev/null
}
# Launches after the stand-in's clock fix (635ee05: layers after a blocking forward wait start
# when it ended); the calibration launches are unchanged by that fix (their forward waits
# never outlast the device: gossip's and ps's backward read in full).
score_launches $D/standin-clockfix clockfix-all
# Launches whose netfits also measured 4 allreduces in flight (7cff1ac).
score_launches $D/standin-inflight inflight-all
# Wire-codec launches (2026-12-06): a row naming a codec is priced at its bytes on the wire.
score_launches $D/standin-codecs codecs-all
# VGG-16 (a model the calibration never saw): one call per launch (a network is looked up
# by size and rate, and a ranking mixes no dilations), each with its own one-rank baseline.
score_vgg16() {  # NAME NETFIT RUN...
    local name=$1 net=$2 runs=(--standin-runs $H/run-googlenet-1-host.json
        --standin-runs $H/run-googlenet-2-1gbit.json --standin-runs $H/run-googlenet-4-1gbit.json)
    shift 2
    for f in "$@"; do runs+=(--standin-runs "$f"); done
    "$PY" -m lab plan-validate "${runs[@]}" --networks $H/net-2-1gbit.json \
        --networks $H/net-4-1gbit.json --networks "$net" "${cal[@]}" \
        --out "$OUT/vgg16-$name.json" > /dev/null
}
L=$D/standin-late/vgg16 V=$D/standin-vgg16
score_vgg16 late-k10 $L/net-8-1gbit.json $L/run-vgg16-8-1gbit.json $L/run-vgg16-1-host.json
score_vgg16 late-k25 $L/net-8-1gbit.json $L/run-vgg16-8-1gbit-k25.json $L/run-vgg16-1-host-k25.json
for k in k10-a k10-b k25; do
    score_vgg16 $k $V/$k/net-8-1gbit.json $V/$k/run-vgg16-8-1gbit.json $V/$k/run-vgg16-1-host.json
done
# ps on VGG-16 with its 411 MB weight on one owner, then split across owners (each run
# says which layout it used: split_parameters).
P=$D/standin-ps-split
for k in 4-whole 4-split; do
    score_vgg16 ps-$k $P/vgg16-$k/net-4-1000mbit.json $P/vgg16-$k/run-vgg16-4-1000mbit.json \
        $P/vgg16-$k/run-vgg16-1-host.json
done
score_vgg16 ps-8-split $P/vgg16-8-split/net-8-1gbit.json $P/vgg16-8-split/run-vgg16-8-1gbit.json \
    $P/vgg16-8-split/run-vgg16-1-host.json
"$PY" - "$OUT" <<'EOF'
import json, sys
names = ["googlenet-all", "resnet50-all", "clockfix-all", "inflight-all", "codecs-all"]
names += [f"vgg16-{d}" for d in ("late-k10", "late-k25", "k10-a", "k10-b", "k25")]
names += ["vgg16-ps-4-whole", "vgg16-ps-4-split", "vgg16-ps-8-split"]
for name in names:
    h = json.load(open(f"{sys.argv[1]}/{name}.json"))["held_out"]
    print(f"{name}: {h['n']} rows, MAPE {h['mape_pct']} %, worst {h['worst_pct']} %, "
          f"median tau {h['median_tau']} (min {h['min_tau']}), max regret {h['max_regret']}")
EOF
