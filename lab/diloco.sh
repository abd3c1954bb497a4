#!/usr/bin/env bash
# Local steps and an outer optimizer beside every-step exchanges (issue 43, item 5; docs/llm.md,
# "Local steps"): the small GPT on the embedded corpus at SIZE ranks, the same steps, seed and
# batch for every contender; validation loss, the bytes each rank sent, tokens/s per rank.
#
#   flock /tmp/gg-quiet.lock bash lab/diloco.sh [OUTDIR]     # default lab/records/diloco
#
# Contenders: DDP, gossipgrad's allreduce and gossip at every step; DiLoCo over the allreduce
# and gossip-DiLoCo (--timing local:H --rule outer: Nesterov, outer lr 0.7, momentum 0.9) at
# H = 10 and 50, gossip-DiLoCo with bf16 on the wire. The local runs merge once at the end
# (--merge-at end), so each summary holds the loss before the merge (test_loss_unmerged: the
# ranks' own models) and after it. Losses and bytes do not depend on the load; tokens/s does
# (uptime before and after each launch in load.txt).
# Environment: SIZE (4), STEPS (200), BATCH (16), SEEDS (0), CONTENDERS (all), MODEL (GPT flags, default the default GPT:
# 4 layers, width 128, 4 heads, context 128).
source "$(dirname "$0")/study.sh" lab/records/diloco "$@"
SIZE=${SIZE:-4}
STEPS=${STEPS:-200}
BATCH=${BATCH:-16}
read -r -a MODEL_FLAGS <<< "${MODEL:-}"
BIN="$(dirname "$(command -v "$PY")")"

launch() {  # NAME ARGS...
    local name=$1
    shift
    local cmd=("$BIN/mpiexec" -n "$SIZE" gossipgrad train -a gpt "${MODEL_FLAGS[@]}" -b "$BATCH"
        --max-steps "$STEPS" -p 20 --no-progress --metrics-out "$OUT/$name.jsonl" "$@")
    echo "$name before: $(uptime)" | tee -a "$OUT/load.txt"
    echo "${cmd[*]}" | sed "s|$PWD/||g" > "$OUT/$name.cmd"
    "${cmd[@]}" > "$OUT/$name.json" 2> "$OUT/$name.log" || echo "$name: exit $?" >> "$OUT/load.txt"
    echo "$name after: $(uptime)" | tee -a "$OUT/load.txt"
}

LOCAL=(--rule outer --merge-at end)
declare -A FLAGS=(
    [ddp]="--strategy ddp"
    [allreduce]="--strategy allreduce"
    [gossip]=""
    [diloco-10]="--strategy allreduce --timing local:10 ${LOCAL[*]}"
    [diloco-50]="--strategy allreduce --timing local:50 ${LOCAL[*]}"
    [gossip-diloco-10]="--timing local:10 ${LOCAL[*]}"
    [gossip-diloco-50]="--timing local:50 ${LOCAL[*]}"
    [gossip-diloco-10-bf16]="--timing local:10 --wire bf16 ${LOCAL[*]}"
)
CONTENDERS=${CONTENDERS:-ddp allreduce gossip diloco-10 diloco-50 gossip-diloco-10 gossip-diloco-50 gossip-diloco-10-bf16}
SEEDS=${SEEDS:-0}
for seed in $SEEDS; do
    for name in $CONTENDERS; do
        tag=$name
        [[ $SEEDS != 0 ]] && tag=$name-seed$seed
        # shellcheck disable=SC2086
        launch "$tag" --seed "$seed" ${FLAGS[$name]}
    done
done
"$PY" - "$OUT" > "$OUT/table.md" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| launch | strategy | timing | wire | val loss, merged | own models (before the merge) "
      "| MB sent per rank | tokens/s per rank |")
print("|---|---|---|---|---|---|---|---|")
for f in sorted(out.glob("*.json")):
    lines = f.read_text().strip().splitlines()
    if not lines:
        print(f"| {f.stem} | (no summary: see {f.stem}.log) |")
        continue
    s = json.loads(lines[-1])
    own = s.get("test_loss_unmerged")
    print(f"| {f.stem} | {s['strategy']} | {s.get('timing', '')} | {s.get('wire', 'fp32')} | "
          f"{s['test_loss']:.4f} | {'' if own is None else f'{own:.4f}'} | "
          f"{s.get('bytes_sent', 0) / 1e6:.1f} | {s.get('tokens_per_s_per_rank', 0):.0f} |")
EOF
cat "$OUT/table.md"
