#!/usr/bin/env bash
# gossip-node's statistical efficiency: steps to a target accuracy beside gossip and
# allreduce at the same size, several seeds (docs/validation/gossip-node.md, "Steps to
# accuracy"). Steps do not depend on the link for these lockstep contenders, so the ranks
# run on the host under mpiexec; GOSSIPGRAD_RANKS_PER_NODE makes the nodes.
#
#   bash lab/gossip_node_tta.sh [OUTDIR]        # default gossip-node-tta/
#
# Environment: N (ranks, 8), NODES ("4 2": ranks per node, one launch each for gossip-node),
# SEEDS ("0 1 2 3 4"), TARGET (0.95), STEPS (200), MIX (param). Per seed: one launch of
# gossip and allreduce, one of gossip-node per NODES value; OUT/steps.json has every row
# and OUT/steps.md the table (mean steps to target, each seed's).
source "$(dirname "$0")/study.sh" gossip-node-tta "$@"
N=${N:-8}
NODES=${NODES:-4 2}
SEEDS=${SEEDS:-0 1 2 3 4}
TARGET=${TARGET:-0.95}
STEPS=${STEPS:-200}
MIX=${MIX:-param}
BIN="$(dirname "$(command -v "$PY")")"
JOB=(--target "$TARGET" --eval-every 1 --steps "$STEPS" --stop-at-target --mix "$MIX")

for seed in $SEEDS; do
    timeout 900 "$BIN/mpiexec" -n "$N" gossipgrad bench tta --strategies gossip,allreduce \
        "${JOB[@]}" --seed "$seed" > "$OUT/flat-$seed.json" 2> "$OUT/flat-$seed.log"
    for r in $NODES; do
        GOSSIPGRAD_RANKS_PER_NODE=$r timeout 900 "$BIN/mpiexec" -n "$N" gossipgrad bench tta \
            --strategies gossip-node "${JOB[@]}" --seed "$seed" > "$OUT/node$r-$seed.json" \
            2> "$OUT/node$r-$seed.log"
    done
done
"$PY" - "$OUT" <<'PYEOF'
import json, pathlib, statistics, sys

out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("*.json")):
    if f.name == "steps.json":
        continue
    record = json.loads(f.read_text().strip().splitlines()[-1])
    kind, seed = f.stem.rsplit("-", 1)
    for name, r in record["results"].items():
        label = name if kind == "flat" else f"{name} ({kind[4:]} a node)"
        rows.append({"contender": label, "seed": int(seed), "steps": r["steps_to_target"],
                     "final_accuracy": r["final_accuracy"], "step_s": r["step_s"]})
(out / "steps.json").write_text(json.dumps(rows, indent=1) + "\n")
lines = ["| contender | mean steps to target | per seed | final accuracy (mean) |",
         "|---|---|---|---|"]
for c in sorted({r["contender"] for r in rows}):
    mine = sorted((r for r in rows if r["contender"] == c), key=lambda r: r["seed"])
    steps = [r["steps"] for r in mine]
    reached = [s for s in steps if s is not None]
    mean = f"{statistics.mean(reached):.1f}" if len(reached) == len(steps) else "not all reached"
    acc = statistics.mean(r["final_accuracy"] for r in mine)
    lines.append(f"| {c} | {mean} | {', '.join(str(s) for s in steps)} | {acc:.4f} |")
(out / "steps.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
