#!/usr/bin/env bash
# The planner's held-out validation (docs/planner.md, "Held-out validation"): every launch
# the docs quote, in order, on a quiet machine (no other jobs: check `uptime` first).
#
#   bash lab/planner_validation.sh [OUTDIR]      # default planner-validation/
#
# Root is needed for the emulated cluster (steps 2b, 2c). About 40 min on the 2-core
# development VM. Each launch writes OUTDIR/<name>.json (the report) and <name>.log
# (stderr), and appends the load average before it to OUTDIR/load.txt; the last step
# prints each report's held-out scores. The scripts' own checkout is used (PYTHONPATH).
source "$(dirname "$0")/study.sh" planner-validation "$@"
MPIEXEC=${MPIEXEC:-$(dirname "$(command -v "$PY")")/mpiexec}
PV=("$PY" -m lab plan-validate --arch mlp --staleness 0,1 --passes 3
    --calibrate-pairs 2 --calibrate-steps 15 --warmup 3)

launch() {  # launch NAME CMD...: record the load, run, keep the report and the log
    local name=$1
    shift
    echo "$name: $(uptime)" | tee -a "$OUT/load.txt"
    "$@" --out "$OUT/$name.json" 2> "$OUT/$name.log" > /dev/null
}

# 1. Held-out sizes, loopback, 3 launches: calibrate (and score in-sample) at 2 ranks,
#    predict and measure 4 and 8 (8 ranks on 2 cores: the host share is predicted).
for i in 1 2 3; do
    launch "oos-loop-$i" "$MPIEXEC" -n 8 "${PV[@]}" --hidden 2048 --steps 30 \
        --calibrate-size 2 --predict-sizes 4,8
done

# 2. Held-out link rates. (a) a loopback calibration of the smaller model (its own 4-rank
#    run is held out too), (b, c) that calibration, frozen, predicting the emulated
#    1 Gbit/s and 100 Mbit/s links at 2 and 4 ranks from each link's own netfit.
launch oos-cal-1024 "$MPIEXEC" -n 4 "${PV[@]}" --hidden 1024 --steps 30 \
    --calibrate-size 2 --predict-sizes 4
launch oos-1gbit "$PY" scripts/emucluster.py run -n 4 --rate 1gbit -- "${PV[@]}" \
    --hidden 1024 --steps 30 --calibration "$OUT/oos-cal-1024.json" --predict-sizes 2,4
launch oos-100mbit "$PY" scripts/emucluster.py run -n 4 --rate 100mbit -- "${PV[@]}" \
    --hidden 1024 --steps 15 --calibration "$OUT/oos-cal-1024.json" --predict-sizes 2,4

# 3. The spare-core path: 2 ranks bound one per core; the report's summary_spare_core is
#    the model with nothing fitted (profile + netfit), next to the calibrated summary.
launch spare-core-bound "$MPIEXEC" -n 2 -bind-to core "${PV[@]}" --hidden 2048 --steps 30

# 4. The three loopback launches scored together, then one line per report.
"$PY" -m lab plan-validate --merge "$OUT/oos-loop-1.json" \
    --merge "$OUT/oos-loop-2.json" --merge "$OUT/oos-loop-3.json" > "$OUT/oos-loop-merged.json"
"$PY" - "$OUT" <<'EOF'
import json, pathlib, sys

def four(s, pre=""):
    tau = s.get(pre + "tau_min", s.get("kendall_tau"))
    worst = s.get(pre + "worst_pct", s.get("worst_abs_pct"))
    return (f'MAPE {s[pre + "mape_pct"]:.1f} % / worst {worst:.1f} % / tau '
            f'{"-" if tau is None else f"{tau:.3f}"} / regret {s[pre + "regret"]:.3f}')

for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    r = json.loads(path.read_text())
    line = [path.stem]
    if "oos_mape_pct" in r:
        line.append("held out: " + four(r, "oos_"))
        line.append("nothing fitted: " + four(r["summary_oos_spare_core"]))
    if "summary" in r:
        line.append("in-sample: " + four(r["summary"]))
        line.append("nothing fitted (scored sizes): " + four(r["summary_spare_core"]))
    print(" | ".join(line))
EOF
