#!/usr/bin/env bash
# Train with gossipgrad through mpirun and a hostfile, on machines without Slurm.
#
#   HOSTFILE=hosts.txt NP=8 jobs/mpirun-hostfile.sh
#   HOSTFILE=hosts.txt NP=8 ARCH=googlenet DATA=/scratch/imagenet jobs/mpirun-hostfile.sh
#
# HOSTFILE lists the machines and how many ranks each takes (one rank per GPU):
#   MPICH (Hydra):  node01:4          Open MPI:  node01 slots=4
#                   node02:4                     node02 slots=4
# The same gossipgrad must be installed at the same path on every machine, and DATA and
# RUN_DIR must be visible from all of them.
#
# Settings (environment variable, default):
#   HOSTFILE    hosts.txt           see above
#   NP          number of ranks (required)
#   ARCH        resnet50            resnet50 | googlenet | resnet18 | cnn | mlp
#   DATA        /datasets/imagenet  ImageFolder root with DATA/train and DATA/val
#   EPOCHS      90
#   BATCH_SIZE  32                  per rank
#   LR          (empty)             empty: the ImageNet recipe for ImageNet models (0.1 x
#                                   BATCH_SIZE / 256, scaled by NP); else per-rank lr
#   WORKERS     4                   data-loader processes per rank
#   RUN_DIR     $PWD/runs/$ARCH     checkpoints; reruns resume from it (--resume auto)
#   EXTRA_ARGS  (empty)             more `gossipgrad train` flags, split on whitespace into
#                                   separate words (no quoting, globbing or $(...))
#   GOSSIPGRAD  gossipgrad          the command to run on every machine
#   MPIRUN      mpirun              the launcher; MPICH/Hydra and Open MPI are recognised
#
# mpirun replaces this script (exec), so signals sent to it reach mpirun, and the exit
# status is mpirun's. To checkpoint and stop, send SIGUSR1: MPICH's Hydra forwards it to
# every rank (checked), which checkpoint at one agreed step and exit 0. SIGTERM to Hydra's
# mpirun kills the ranks without a checkpoint; send SIGTERM to the rank processes
# themselves instead (any one of them is enough).
set -euo pipefail

HOSTFILE="${HOSTFILE:-hosts.txt}"
NP="${NP:?set NP to the number of ranks, e.g. NP=8}"
ARCH="${ARCH:-resnet50}"
DATA="${DATA:-/datasets/imagenet}"
EPOCHS="${EPOCHS:-90}"
BATCH_SIZE="${BATCH_SIZE:-32}"
LR="${LR:-}"
WORKERS="${WORKERS:-4}"
RUN_DIR="${RUN_DIR:-$PWD/runs/$ARCH}"
EXTRA_ARGS="${EXTRA_ARGS:-}"
GOSSIPGRAD="${GOSSIPGRAD:-gossipgrad}"
MPIRUN="${MPIRUN:-mpirun}"

read -r -d '' -a extra <<<"$EXTRA_ARGS" || true
lr=()
if [[ -n "$LR" ]]; then
    lr=(--lr "$LR")
fi

if [[ ! -r "$HOSTFILE" ]]; then
    echo "error: hostfile '$HOSTFILE' not readable; set HOSTFILE (format: see $0)" >&2
    exit 2
fi

# Open MPI wants --hostfile and -x to export variables; Hydra takes -f and exports the
# whole environment by default.
if "$MPIRUN" --version 2>&1 | grep -q 'Open MPI'; then
    launcher=("$MPIRUN" -n "$NP" --hostfile "$HOSTFILE" -x PATH)
else
    launcher=("$MPIRUN" -n "$NP" -f "$HOSTFILE")
fi

cmd=("${launcher[@]}"
    "$GOSSIPGRAD" train -a "$ARCH" --data "$DATA" --epochs "$EPOCHS" -b "$BATCH_SIZE"
    "${lr[@]}" -j "$WORKERS" --run-dir "$RUN_DIR" --resume auto "${extra[@]}")

printf '%-11s %s\n' HOSTFILE "$HOSTFILE" NP "$NP" ARCH "$ARCH" DATA "$DATA" \
    EPOCHS "$EPOCHS" BATCH_SIZE "$BATCH_SIZE" LR "${LR:-(recipe)}" WORKERS "$WORKERS" \
    RUN_DIR "$RUN_DIR" EXTRA_ARGS "$EXTRA_ARGS" GOSSIPGRAD "$GOSSIPGRAD" MPIRUN "$MPIRUN"
printf 'command '
printf ' %q' "${cmd[@]}"
printf '\n'

mkdir -p -- "$RUN_DIR"
exec "${cmd[@]}"
