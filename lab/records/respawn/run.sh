#!/usr/bin/env bash
# The launches behind lab/records/respawn/README.md, in order, each under the quiet lock
# (flock /tmp/gg-quiet.lock), with the load average before and after. Run from the checkout:
#   bash lab/records/respawn/run.sh
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=lab/records/respawn
export PYTHONPATH=$PWD OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
py=.venv-ompi/bin/python
run() {  # NAME COMMAND...: stdout (JSON) to NAME.json, stderr to NAME.log
    local name=$1; shift
    { echo "# $*"; echo "# before: $(uptime)"; } > "$out/$name.log"
    flock /tmp/gg-quiet.lock nice -n 5 "$@" > "$out/$name.json" 2>> "$out/$name.log"
    echo "# exit $?, after: $(uptime)" >> "$out/$name.log"
}
# 1. kill -> training at launch size, digits MLP, 4 and 8 ranks, one and two failures
run time4 $py -m lab failure --on-failure respawn --ranks 4 --epochs 3 --kills 2:12 --kills 1:12,3:12
run time8 $py -m lab failure --on-failure respawn --ranks 8 --epochs 3 --kills 3:7 --kills 2:7,6:7
# 2. accuracy: 1, 2, 3 respawns at different steps, 8 ranks, 10 epochs, against no failure
run accuracy8 $py -m lab failure --on-failure respawn --ranks 8 --epochs 10 \
    --kills 3:27 --kills 2:12,6:37 --kills 1:8,4:23,7:41
# 3. per-step cost with respawn armed and nothing failing, against abort, in one launch
run cost8 .venv-ompi/bin/mpiexec --with-ft ulfm --oversubscribe -n 8 $py -m lab failure-cost \
    --modes abort,respawn --reps 4 --epochs 20
# 4. a ResNet-50-sized model on the stand-in device (state on the wire: model + momentum)
run standin4 $py -m lab failure --on-failure respawn --ranks 4 --epochs 1 --kills 2:8 \
    --train-flag=-a --train-flag=resnet50 --train-flag=--synthetic \
    --train-flag=--device --train-flag=standin:resnet50-p100-fp32-b32 \
    --train-flag=--max-steps --train-flag=20 --train-flag=--print-freq --train-flag=1
