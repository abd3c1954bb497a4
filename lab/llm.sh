#!/usr/bin/env bash
# The small GPT on the embedded corpus at 1, 2 and 4 ranks (issue 43, item 4; docs/llm.md,
# "Today's figures"): loss and perplexity after STEPS steps, tokens/s per rank. Run on a
# quiet host, one launch at a time:
#
#   flock /tmp/gg-quiet.lock bash lab/llm.sh [OUTDIR]      # default lab/records/llm
#
# Every launch: gossipgrad train -a gpt (the default shape: 4 layers, width 128, 4 heads,
# context 128; AdamW at lr 1e-3, cosine decay to zero at the last step), BATCH windows per
# rank, the default strategy (gossip, mixing gradients under AdamW) and, at 4 ranks,
# allreduce beside it. Losses do not depend on the load (same seed, same size: the same
# run); tokens/s does, so uptime is written before and after each launch (load.txt).
# Environment: STEPS (200), BATCH (16), SIZES (1 2 4).
source "$(dirname "$0")/study.sh" lab/records/llm "$@"
STEPS=${STEPS:-200}
BATCH=${BATCH:-16}
SIZES=${SIZES:-1 2 4}
BIN="$(dirname "$(command -v "$PY")")"

launch() {  # NAME SIZE ARGS...
    local name=$1 n=$2
    shift 2
    local cmd=(gossipgrad train -a gpt -b "$BATCH" --max-steps "$STEPS" -p 20 --no-progress
        --metrics-out "$OUT/$name.jsonl" "$@")
    [[ $n -gt 1 ]] && cmd=("$BIN/mpiexec" -n "$n" "${cmd[@]}")
    echo "$name before: $(uptime)" | tee -a "$OUT/load.txt"
    echo "${cmd[*]}" | sed "s|$PWD/||g" > "$OUT/$name.cmd"  # paths relative to the checkout
    "${cmd[@]}" > "$OUT/$name.json" 2> "$OUT/$name.log"
    echo "$name after: $(uptime)" | tee -a "$OUT/load.txt"
}

for n in $SIZES; do
    launch "gpt-$n" "$n"
done
launch "gpt-4-allreduce" 4 --strategy allreduce
"$PY" - "$OUT" > "$OUT/table.md" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("| launch | ranks | strategy | steps | tokens seen | val loss | val perplexity | tokens/s per rank |")
print("|---|---|---|---|---|---|---|---|")
for f in sorted(out.glob("gpt-*.json")):
    s = json.loads(f.read_text().strip().splitlines()[-1])
    tokens = s["steps"] * s["batch_size"] * s["size"] * 128  # the default context
    print(f"| {f.stem} | {s['size']} | {s['strategy']} | {s['steps']} | {tokens:,} | "
          f"{s['test_loss']:.4f} | {s['test_perplexity']:.3f} | {s['tokens_per_s_per_rank']:.0f} |")
EOF
cat "$OUT/table.md"
