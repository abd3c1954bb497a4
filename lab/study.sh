# Sourced by the lab's study scripts (lab/*_validation.sh, lab/standin_heldout.sh): run from
# the checkout's root with its own code first on PYTHONPATH, one torch thread per rank, and
# every output under OUT (the script's first argument, else the default it passes).
#
#   source "$(dirname "$0")/study.sh" default-outdir "$@"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${2:-$1}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1
PY=${PY:-python}
