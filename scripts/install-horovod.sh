#!/usr/bin/env bash
# Build and install Horovod 0.28.1 (PyTorch + MPI + Gloo, no TensorFlow/MXNet) for one Python,
# against the torch and the MPI that Python already has.
#
#   scripts/install-horovod.sh [PYTHON]        # default: `python` on PATH
#   scripts/install-horovod.sh /work/venv/bin/python
#
# Idempotent: does nothing when `import horovod.torch` works and horovod.torch.mpi_built() is
# true. The build takes ~7 CPU-minutes (~4 min on 2 idle cores; 17 min on a loaded 2-core box).
# Needs network access to PyPI (the sdist, cmake if absent, horovod's small runtime deps) and,
# if no C++ compiler is present, root for apt-get.
#
# MPI: the directory of PYTHON goes first on PATH, so a pip-installed MPI (e.g. the `mpich`
# wheel, whose mpicc/mpicxx live next to python) is the one CMake finds; the installed library
# is then checked to link against that MPI's libmpi and no other.
#
# Why patches: 0.28.1's CMake asks for C++14; torch's headers need C++17 (older torch) or C++20
# (newer torch, e.g. 2.14; detected from ATen.h). We rewrite `set(CMAKE_CXX_STANDARD 14)` to 17
# in CMakeLists.txt and to torch's standard in horovod/torch/CMakeLists.txt, and fail if that
# line is not there (the sdist changed and the patch must be revisited).
#
# Env: GOSSIPGRAD_HOROVOD_CUDA=1 keeps horovod's CUDA detection (default: CPU-only, see below).
#      HOROVOD_WITHOUT_GLOO=1 skips Gloo (saves build time, loses `horovodrun --gloo`).
#      HOROVOD_BUILD_LOG=FILE keeps the full build log there (default: a temp file, kept on error).
set -euo pipefail

HOROVOD_VERSION=0.28.1
PYTHON_ARG=${1:-python}

say() { printf '[install-horovod] %s\n' "$*"; }
die() { printf '[install-horovod] error: %s\n' "$*" >&2; exit 1; }

PYTHON=$(command -v "$PYTHON_ARG") || die "no python '$PYTHON_ARG' (pass the interpreter as the first argument)"
# sys.executable, not a resolved symlink: for a venv this is <venv>/bin/python.
PYBIN=$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")
export PATH="$PYBIN:$PATH"
say "python: $PYTHON ($("$PYTHON" -V 2>&1)); PATH starts with $PYBIN"

horovod_ready() {
    "$PYTHON" - <<'EOF' 2>/dev/null
import sys
import horovod
import horovod.torch as hvd
sys.exit(0 if hvd.mpi_built() else 1)
EOF
}

if horovod_ready; then
    say "horovod $("$PYTHON" -c 'import horovod; print(horovod.__version__)') with torch+MPI is already importable; nothing to do"
    exit 0
fi

"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch; install torch first"
say "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

# --- toolchain --------------------------------------------------------------------------
if ! command -v c++ >/dev/null || ! command -v make >/dev/null; then
    command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] \
        || die "need a C++ compiler and make (e.g. apt-get install g++ make) and cannot install them"
    say "installing g++ and make with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ make
fi
if ! command -v cmake >/dev/null; then
    say "installing cmake with pip"
    "$PYTHON" -m pip install -q cmake
fi
say "c++: $(c++ --version | head -n1); $(cmake --version | head -n1)"

MPICXX=$(command -v mpicxx) || die "no mpicxx on PATH; install an MPI (e.g. '$PYTHON -m pip install mpich')"
MPI_HOME=$(dirname "$(dirname "$MPICXX")")
export MPI_HOME
say "MPI: $MPICXX ($(mpichversion 2>/dev/null | head -n1 || mpicxx --version 2>/dev/null | head -n1)); MPI_HOME=$MPI_HOME"

# --- source -----------------------------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/install-horovod.XXXXXX")
LOG=${HOROVOD_BUILD_LOG:-$WORK/build.log}
KEEP_LOG=${HOROVOD_BUILD_LOG:+1}
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

fail_build() {
    printf '[install-horovod] error: %s; last lines of the build log:\n' "$1" >&2
    tail -n 60 "$LOG" >&2 || true
    if [ -z "$KEEP_LOG" ]; then
        LOG_KEPT="${TMPDIR:-/tmp}/install-horovod-$$.log"
        cp "$LOG" "$LOG_KEPT" && LOG="$LOG_KEPT"
    fi
    die "full log: $LOG"
}

say "downloading the horovod==$HOROVOD_VERSION sdist"
"$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$WORK" "horovod==$HOROVOD_VERSION" \
    || die "pip download of horovod==$HOROVOD_VERSION failed"
tar -xzf "$WORK/horovod-$HOROVOD_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/horovod-$HOROVOD_VERSION"

patch_cxx_standard() {
    local file="$SRC/$1" std=$2
    grep -q 'set(CMAKE_CXX_STANDARD 14)' "$file" \
        || die "$1: 'set(CMAKE_CXX_STANDARD 14)' not found; the sdist changed, revisit the patch"
    sed -i "s/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD $std)/" "$file"
    grep -q "set(CMAKE_CXX_STANDARD $std)" "$file" || die "$1: the C++ standard patch did not apply"
    say "patched $1: CMAKE_CXX_STANDARD 14 -> $std"
}
# The torch extension (which also compiles horovod/common) needs what torch's headers need:
# C++17 for older torch, C++20 for newer (2.14 here: ATen.h says "#error C++20 or later ...").
TORCH_INC=$("$PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
TORCH_STD=17
grep -q 'C++20 or later' "$TORCH_INC/ATen/ATen.h" && TORCH_STD=20
patch_cxx_standard CMakeLists.txt 17
patch_cxx_standard horovod/torch/CMakeLists.txt "$TORCH_STD"

# A CUDA build of torch plus any nvcc on PATH makes horovod build its CUDA ops, which fails
# without a complete toolkit (no cudart). gossipgrad's horovod strategy moves CPU tensors, so
# build CPU-only unless GOSSIPGRAD_HOROVOD_CUDA=1 asks for horovod's own CUDA detection.
if [ "${GOSSIPGRAD_HOROVOD_CUDA:-}" != 1 ]; then
    FINDPT="$SRC/cmake/Modules/FindPytorch.cmake"
    CUDA_TEST='print(True if ((torch.version.cuda is not None) and (CUDA_HOME is not None)) else False)'
    grep -qF "$CUDA_TEST" "$FINDPT" \
        || die "cmake/Modules/FindPytorch.cmake: CUDA test not found; the sdist changed, revisit the patch"
    # BRE: parentheses are literal; the dots match themselves among others.
    sed -i "s/$CUDA_TEST/print(False)/" "$FINDPT"
    grep -qF "$CUDA_TEST" "$FINDPT" && die "FindPytorch.cmake: failed to disable the CUDA test"
    say "patched cmake/Modules/FindPytorch.cmake: CPU-only (set GOSSIPGRAD_HOROVOD_CUDA=1 for CUDA)"
fi

# --- build ------------------------------------------------------------------------------
export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1
export HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
if [ "${HOROVOD_WITHOUT_GLOO:-}" != 1 ]; then export HOROVOD_WITH_GLOO=1; fi
# setup.py uses -j8 unless MAKEFLAGS is set; match the cores we have.
export MAKEFLAGS="-j$(nproc)"
say "building (HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=${HOROVOD_WITH_GLOO:-0}" \
    "MAKEFLAGS=$MAKEFLAGS); log: $LOG"
start=$(date +%s)
"$PYTHON" -m pip install -v --no-build-isolation --no-cache-dir "$SRC" >"$LOG" 2>&1 \
    || fail_build "pip install failed after $(( $(date +%s) - start )) s"
say "built and installed in $(( $(date +%s) - start )) s"

# --- verify -----------------------------------------------------------------------------
horovod_ready || fail_build "installed, but 'import horovod.torch' fails or mpi_built() is false"
LIB=$("$PYTHON" -c 'import glob, os, horovod.torch as h; print(glob.glob(os.path.join(os.path.dirname(h.__file__), "mpi_lib_v2*.so"))[0])')
LIBMPI=$(ldd "$LIB" | awk '/libmpi/ {print $3}')
case "$LIBMPI" in
    "$MPI_HOME"/*) say "$(basename "$LIB") links $LIBMPI" ;;
    *) die "$(basename "$LIB") links '$LIBMPI', not the libmpi under $MPI_HOME; check PATH/MPI_HOME" ;;
esac
"$PYTHON" -c 'import horovod.torch as h; print("[install-horovod] mpi_built:", h.mpi_built(), "gloo_built:", h.gloo_built())'
