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
# The checkout's venv (scripts/test.sh makes it) when no PY is given: its python, and its
# mpiexec and gossipgrad on PATH for the launches.
if [[ -z ${PY:-} && -x .venv/bin/python ]]; then
    PY=$PWD/.venv/bin/python
    export PATH=$PWD/.venv/bin:$PATH
fi
PY=${PY:-python}
