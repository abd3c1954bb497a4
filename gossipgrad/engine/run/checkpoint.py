"""Checkpoints: one consensus model plus everything needed to resume at the same step.

    RUN_DIR/ckpt-000001234.pt            written by rank 0 (what ``--resume auto`` finds)
    RUN_DIR/ckpt-000001234.rank3.pt      per-rank states, only when there are any

What is saved (plain tensors, numbers and strings: ``torch.load(weights_only=True)``):
``model`` and ``optimizer`` after a global average of parameters, floating buffers and
optimizer state (momentum), so every rank continues from the same values an uninterrupted
run continues from after its own checkpoint; the position ``step``/``epoch``/``batch`` and
the gossip ``schedule`` position (step, cycle, rotation seed); the ``lr_schedule``; ``rng``;
``compat`` (what a resuming run must match); the resolved ``config``; ``states``: entries
identical on every rank (``state_dict()`` of each object passed in ``states``); and
``rank_states``: names of per-rank entries, each rank's in its own ``.rankR.pt`` file.
The dictionary is built by ``gossipgrad.engine.run.snapshot``; this module writes and reads files.

Hook for the background shuffle: pass it as ``train(cfg, comm, rank_states={"shuffle":
worker})`` (anything with ``state_dict()``/``load_state_dict()``; its slots differ per rank,
so it is a per-rank state); it is then saved with every checkpoint and restored on resume.

RNG design: the trainer reseeds torch at every step from (seed, rank, step), data order is a
function of (seed, rank, epoch, batch) and augmentation of (seed, epoch, sample), so no
per-rank RNG state is needed to resume exactly; rank 0's torch/numpy/python states are kept
in ``rng`` for code outside the step and restored on every rank.

Atomicity: each file is written to ``NAME.tmp``, fsynced and renamed, then its directory is
fsynced. Per-rank files are complete before rank 0 renames the main file, so a main file
that exists is a whole checkpoint. Older checkpoints are deleted only after the new one is
complete; the newest ``keep`` (default 2) stay.
"""

# Over 300 lines on purpose: writing, finding and checking a checkpoint share one file layout
# and one atomicity rule; split, a reader could drift from the writer.

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import time
import warnings
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.agreement import AgreedError, check_settings

log = logging.getLogger(__name__)

FORMAT = "gossipgrad-checkpoint"
VERSION = 1
_MAIN = re.compile(r"^ckpt-(\d+)\.pt$")
_ANY = re.compile(r"^ckpt-(\d+)\.(?:rank\d+\.)?pt(?:\.tmp)?$")


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def checkpoint_path(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, f"ckpt-{step:09d}.pt")


def rank_path(path: str, rank: int) -> str:
    return f"{path[: -len('.pt')]}.rank{rank}.pt"


def find_latest(run_dir: str) -> str | None:
    """The complete checkpoint with the highest step in ``run_dir`` (None if there is none)."""
    if not os.path.isdir(run_dir):
        return None
    steps = [(int(m.group(1)), e) for e in os.listdir(run_dir) if (m := _MAIN.match(e))]
    return os.path.join(run_dir, max(steps)[1]) if steps else None


def locate(resume: str | None, run_dir: str | None) -> str | None:
    """The file ``--resume`` names: a path, or ``auto`` = latest in ``run_dir`` (or None)."""
    if not resume:
        return None
    if resume == "auto":
        if not run_dir:
            raise ValueError("--resume auto needs --run-dir (where checkpoints are written)")
        return find_latest(run_dir)
    if not os.path.isfile(resume):
        raise ValueError(f"--resume {resume}: no such checkpoint file")
    return resume


class _Recorded:
    """A file whose write errors are kept: ``torch.save`` turns an ``OSError`` of the file
    (no space left ...) into a RuntimeError naming its own internals ("enforce fail at
    inline_container.cc"); the recorded one names the cause."""

    def __init__(self, f: Any) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.f.flush()


def write_atomic(obj: Any, path: str, before_rename: Callable[[str], None] | None = None) -> int:
    """``torch.save`` to ``path.tmp``, fsync, rename over ``path``; returns bytes written.
    ``before_rename(tmp)`` runs between the two (the failure tests tear the file there and
    kill the rank). A failure raises OSError naming the file and its cause (``No space left
    on device``, ``Read-only file system``, a directory that vanished) and removes the
    partial ``.tmp``; ``path`` itself is untouched."""
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            out = _Recorded(f)
            try:
                torch.save(obj, out)
            except RuntimeError:
                if out.error is None:
                    raise
                raise out.error from None
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        if before_rename is not None:
            before_rename(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise OSError(exc.errno, exc.strerror or str(exc), tmp) from None
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return size


def read(path: str) -> dict[str, Any]:
    """Load a checkpoint file on CPU with ``weights_only=True``; ValueError if unusable."""
    try:
        with warnings.catch_warnings():  # torch warns about foreign pickle protocols
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        why = _reason(exc)
        advice = (
            ""
            if "malicious" in why
            else "; the file is damaged or not a gossipgrad checkpoint (resume from an "
            "older ckpt-*.pt, or start afresh)"
        )
        raise ValueError(f"cannot read checkpoint {path}: {why}{advice}") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"{path} is not a gossipgrad checkpoint (no format {FORMAT!r})")
    if state.get("version") != VERSION:
        raise ValueError(
            f"{path} is checkpoint version {state.get('version')}; this "
            f"gossipgrad reads version {VERSION}"
        )
    return state


def _reason(exc: BaseException) -> str:
    """The informative part of a loader error. torch's ``weights_only`` errors are long and
    suggest loading with ``weights_only=False``, which would run whatever the file holds:
    that advice is never repeated; a file that asks for a Python global is named as such."""
    text = str(exc)
    wanted = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
    if wanted:
        return (
            f"it asks to import and run the Python object {wanted.group(1)}, which no "
            "checkpoint needs (a gossipgrad checkpoint holds tensors, numbers and strings "
            "only), so it was refused unread: the file may be malicious, do not load it"
        )
    found = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\n|$)", text, re.S)
    lines = [
        ln.strip()
        for ln in text.splitlines()
        if ln.strip() and "weights_only" not in ln.lower() and "weights only" not in ln.lower()
    ]
    detail = found.group(1).strip() if found else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {' '.join(detail.split())}"


def check_compatible(state: dict[str, Any], expected: dict[str, Any], path: str) -> None:
    """Raise ValueError listing every ``compat`` entry that differs from this run."""
    saved = state.get("compat", {})
    diffs = [
        f"{k} is {saved.get(k)!r} in the checkpoint but {v!r} in this run"
        for k, v in expected.items()
        if saved.get(k) != v
    ]
    if diffs:
        raise ValueError(
            f"checkpoint {path} does not fit this run: {'; '.join(diffs)}. "
            "Resume with the settings it was written with, or use a new "
            "--run-dir to start afresh"
        )


def cpu(tree: Any) -> Any:
    """``tree`` with every tensor moved to the CPU and numpy scalars made Python numbers
    (``weights_only`` loading refuses numpy objects); dicts, lists and tuples kept."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, np.generic):
        return tree.item()
    if isinstance(tree, dict):
        return {k: cpu(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(cpu(v) for v in tree)
    return tree


class Checkpointer:
    """Writes checkpoints of one run into ``run_dir``. Collective: call on every rank."""

    def __init__(self, run_dir: str, comm: Communicator, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.run_dir, self.comm, self.keep = run_dir, comm, keep
        self.before_rename: Callable[[str], None] | None = None  # see write_atomic
        self.last_step = -1
        self.last_bytes, self.last_seconds = 0, 0.0
        if comm.rank == 0:
            os.makedirs(run_dir, exist_ok=True)

    def check_room(self, nbytes: int) -> None:
        """Rank 0: OSError naming ``run_dir`` unless its file system has room for one more
        checkpoint of about ``nbytes`` (checked before the first step, not at the first
        epoch's end)."""
        if self.comm.rank != 0:
            return
        try:
            st = os.statvfs(self.run_dir)
        except OSError as exc:
            raise OSError(exc.errno, f"--run-dir {self.run_dir}: {exc.strerror}") from None
        free = st.f_bavail * st.f_frsize
        if free < nbytes:
            full = OSError(
                f"--run-dir {self.run_dir}: no space left for a checkpoint: "
                f"{free / 1e6:.2f} MB free, one takes about {nbytes / 1e6:.2f} MB; free some "
                "space or use another --run-dir"
            )
            full.errno = errno.ENOSPC
            raise full

    def save(
        self, step: int, state: dict[str, Any], rank_states: dict[str, Stateful] | None = None
    ) -> str:
        """Write ``state`` (rank 0's is used) as step ``step``'s checkpoint; returns its path.

        Raises OSError on every rank if any rank failed to write; the previous checkpoint
        is then untouched, and this step's per-rank files are removed (a part without its
        main file is no checkpoint).
        """
        t0 = time.perf_counter()
        path = checkpoint_path(self.run_dir, step)
        nbytes = 0
        try:
            if rank_states:
                state = {**state, "rank_states": sorted(rank_states)}
                mine = {k: cpu(v.state_dict()) for k, v in rank_states.items()}
                hook = self.before_rename if self.comm.rank else None  # rank 0's: the main file
                nbytes += self._all_ok(
                    lambda: write_atomic(mine, rank_path(path, self.comm.rank), hook),
                    f"its part of checkpoint {path}",
                )
            nbytes += self._all_ok(
                lambda: write_atomic(state, path, self.before_rename) if self.comm.rank == 0 else 0,
                f"checkpoint {path}",
            )
        except OSError:
            if not os.path.exists(path):  # else an earlier write of this step's, complete
                with contextlib.suppress(OSError):
                    os.remove(rank_path(path, self.comm.rank))
            raise
        if self.comm.rank == 0:
            self._prune(step)
        self.last_step, self.last_bytes = step, nbytes
        self.last_seconds = time.perf_counter() - t0
        return path

    def _all_ok(self, write: Any, what: str) -> int:
        """``write()`` on every rank; if it failed on any, OSError on every rank with one
        message (the ranks and each cause, reported by rank 0: ``reporter``)."""
        error: OSError | None = None
        nbytes = 0
        try:
            nbytes = write()
        except OSError as exc:
            error = exc
        problem = None if error is None else f"could not write {what}: {self._cause(error)}"
        # An allreduce first, then the messages only if a write failed: a rank that died
        # meanwhile (ULFM) must fail an allreduce: an all-gather failed that way left Open
        # MPI 5.0's MPI_Finalize spinning on the survivors (lab/records/failure.md).
        flag = np.array([problem is not None], dtype=np.int64)
        if not allreduce_(self.comm, flag, ReduceOp.MAX, what="checkpoint write")[0]:
            return nbytes
        try:
            check_settings(self.comm, [], problem, what="checkpoint write")
        except AgreedError as agreed:
            failure = OSError(f"{agreed}; {self._what_is_kept()}")
            failure.errno = error.errno if error is not None else None
            failure.reporter = agreed.reporter  # type: ignore[attr-defined]
            raise failure from error
        return nbytes

    def _what_is_kept(self) -> str:
        """What a failed write leaves the user: the earlier checkpoints, or none yet."""
        try:
            earlier = any(_MAIN.match(e) for e in os.listdir(self.run_dir))
        except OSError:
            earlier = False
        if earlier:
            return f"earlier checkpoints in {self.run_dir} are kept"
        return f"no checkpoint of this run is in {self.run_dir} yet (this was its first)"

    def _cause(self, error: OSError) -> str:
        if isinstance(error, FileNotFoundError) and not os.path.isdir(self.run_dir):
            return f"{self.run_dir} no longer exists (deleted or unmounted while the job ran)"
        return error.strerror or str(error)

    def _prune(self, step: int) -> None:
        """Delete checkpoints older than the newest ``keep`` complete ones, and stale tmps."""
        entries = [(int(m.group(1)), e) for e in os.listdir(self.run_dir) if (m := _ANY.match(e))]
        kept = sorted({s for s, e in entries if _MAIN.match(e)}, reverse=True)[: self.keep]
        for s, e in entries:
            if s not in kept and s <= step:
                try:
                    os.remove(os.path.join(self.run_dir, e))
                except OSError as exc:
                    log.warning("could not delete old checkpoint file %s: %s", e, exc)


def check_rank_part(state: dict[str, Any], path: str, rank: int) -> None:
    """ValueError unless this rank's part of checkpoint ``path`` exists (when it has parts)."""
    mine = rank_path(path, rank)
    if state.get("rank_states") and not os.path.isfile(mine):
        raise ValueError(
            f"checkpoint {path} has no part for this rank ({mine} is missing: deleted, or "
            "not on a file system this rank sees); resume from an older checkpoint"
        )


def read_rank(path: str) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix
        raise ValueError(f"cannot read per-rank checkpoint file {path}: {_reason(exc)}") from None
