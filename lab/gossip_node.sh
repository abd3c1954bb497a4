#!/usr/bin/env bash
# gossip beside gossip-node, allreduce and `local` on the emulated cluster with several ranks
# on each node: `--ranks-per-node R` puts R ranks in one namespace, behind one shaped link
# (they talk to each other over its loopback), so a node's ranks share its network interface.
# Stand-in device (PROFILE), links dilated K times; one launch per rate.
#
#   bash lab/gossip_node.sh [OUTDIR]        # default gossip-node/
#
# Environment: N (ranks, 8), R (ranks per node, 4), PROFILE (googlenet), DILATE (10), RATES
# ("200mbit": with DILATE 10 it stands for 2 Gbit/s), STRATEGIES (gossip,gossip-node,
# allreduce,local), REPS (2). Writes OUT/bench-RATE.json (the bench record) and its log.
source "$(dirname "$0")/study.sh" gossip-node "$@"
N=${N:-8}
R=${R:-4}
PROFILE=${PROFILE:-googlenet}
DILATE=${DILATE:-10}
RATES=${RATES:-200mbit}
STRATEGIES=${STRATEGIES:-gossip,gossip-node,allreduce,local}
REPS=${REPS:-2}

for rate in $RATES; do
    "$PY" scripts/emucluster.py run -n "$N" --ranks-per-node "$R" --rate "$rate" -- \
        gossipgrad bench strategies --device "standin:$PROFILE" --dilate "$DILATE" \
        --strategies "$STRATEGIES" --steps 2 --reps "$REPS" --warmup 1 --together one \
        --comm-timeout 300 > "$OUT/bench-$rate.json" 2> "$OUT/bench-$rate.log"
    "$PY" - "$OUT/bench-$rate.json" "$rate" "$R" <<'PYEOF'
import json, sys

record = json.loads(open(sys.argv[1], encoding="utf-8").read().strip().splitlines()[-1])
rows = {r["name"]: r for r in record["results"]}
local = rows.get("local", {}).get("step_s")
for name, r in rows.items():
    print(json.dumps({
        "rate": sys.argv[2], "ranks_per_node": int(sys.argv[3]), "name": name,
        "step_s_undilated": r.get("step_s_undilated", r["step_s"]),
        "over_local": round(r["step_s"] / local, 3) if local else None,
        "posted_mb_per_step": round(r["posted_bytes_per_step"] / 1e6, 1),
        "cpu_s_per_step": r.get("cpu_s_per_step"),
    }))
PYEOF
done
