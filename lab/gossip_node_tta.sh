#!/usr/bin/env bash
# gossip-node's statistical efficiency and time to accuracy beside gossip and allreduce at
# the same size, several seeds (lab/records/gossip-node.md, "Steps and time to
# accuracy"). Real training (digits MLP), an evaluation every step.
#
#   bash lab/gossip_node_tta.sh [OUTDIR]        # default gossip-node-tta/
#
# Without RATE the ranks run on the host under mpiexec and GOSSIPGRAD_RANKS_PER_NODE makes
# the nodes: steps to target (lockstep contenders take the same steps whatever the link),
# the flat contenders once per seed, gossip-node once per NODES value. With RATE (e.g.
# 1gbit; as root) every launch runs on the emulated cluster with `--ranks-per-node R`, a
# node's ranks behind one shaped link, all contenders in one launch per R: seconds to
# target too (2 cores run the arithmetic: a CPU-bound figure, not a stand-in cluster's).
# Environment: N (ranks, 8), NODES ("4 2"), SEEDS ("0 1 2 3 4"), TARGET (0.95), STEPS (200),
# FLAT (gossip,allreduce), NODE (gossip-node; contenders take settings, e.g.
# gossip-node:staleness=1), RATE (none). OUT/steps.json has every row, OUT/steps.md the table.
source "$(dirname "$0")/study.sh" gossip-node-tta "$@"
N=${N:-8}
NODES=${NODES:-4 2}
SEEDS=${SEEDS:-0 1 2 3 4}
TARGET=${TARGET:-0.95}
STEPS=${STEPS:-200}
FLAT=${FLAT:-gossip,allreduce}
NODE=${NODE:-gossip-node}
RATE=${RATE:-}
BIN="$(dirname "$(command -v "$PY")")"
EMU=("$PY" scripts/emucluster.py)
JOB=(--target "$TARGET" --eval-every 1 --steps "$STEPS" --stop-at-target)

if [ -n "$RATE" ]; then
    "${EMU[@]}" cleanup > /dev/null 2>&1 || true
    trap '"${EMU[@]}" cleanup > /dev/null 2>&1 || true' EXIT
fi
for seed in $SEEDS; do
    if [ -z "$RATE" ]; then
        timeout 900 "$BIN/mpiexec" -n "$N" gossipgrad bench tta --strategies "$FLAT" \
            "${JOB[@]}" --seed "$seed" > "$OUT/flat-$seed.json" 2> "$OUT/flat-$seed.log"
    fi
    for r in $NODES; do
        if [ -n "$RATE" ]; then
            timeout 1800 "${EMU[@]}" run -n "$N" --ranks-per-node "$r" --rate "$RATE" -- \
                gossipgrad bench tta --strategies "$FLAT,$NODE" "${JOB[@]}" --seed "$seed" \
                > "$OUT/emu$r-$seed.json" 2> "$OUT/emu$r-$seed.log"
        else
            GOSSIPGRAD_RANKS_PER_NODE=$r timeout 900 "$BIN/mpiexec" -n "$N" gossipgrad bench \
                tta --strategies "$NODE" "${JOB[@]}" --seed "$seed" \
                > "$OUT/node$r-$seed.json" 2> "$OUT/node$r-$seed.log"
        fi
    done
done
"$PY" - "$OUT" <<'PYEOF'
import json, pathlib, statistics, sys

out = pathlib.Path(sys.argv[1])
rows = []
for f in sorted(out.glob("*-*.json")):
    record = json.loads(f.read_text().strip().splitlines()[-1])
    kind, seed = f.stem.rsplit("-", 1)
    for name, r in record["results"].items():
        where = {"flat": "", "node": f" ({kind[4:]} a node)", "emu": f" ({kind[3:]} a node)"}
        rows.append({"contender": name + where[kind.rstrip("0123456789")], "seed": int(seed),
                     "steps": r["steps_to_target"], "seconds": r["seconds_to_target"],
                     "final_accuracy": r["final_accuracy"], "step_s": r["step_s"]})
(out / "steps.json").write_text(json.dumps(rows, indent=1) + "\n")


def mean(values, fmt):
    return fmt.format(statistics.mean(values)) if None not in values else "not all reached"


lines = ["| contender | steps to target: mean | per seed | seconds to target: mean | "
         "step s: mean | final accuracy: mean |", "|---|---|---|---|---|---|"]
for c in sorted({r["contender"] for r in rows}):
    mine = sorted((r for r in rows if r["contender"] == c), key=lambda r: r["seed"])
    steps = [r["steps"] for r in mine]
    lines.append(
        f"| {c} | {mean(steps, '{:.1f}')} | {', '.join(str(s) for s in steps)} | "
        f"{mean([r['seconds'] for r in mine], '{:.2f}')} | "
        f"{mean([r['step_s'] for r in mine], '{:.3f}')} | "
        f"{mean([r['final_accuracy'] for r in mine], '{:.4f}')} |")
(out / "steps.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PYEOF
