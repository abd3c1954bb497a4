"""What every rank checks before the model is built, and the one collective that compares it.

    source, lock = prepare(cfg, comm, pin_memory=False)

Each rank checks its options for its size and MPI, opens its data (scanning an ImageFolder),
and rank 0 checks and locks the run directory and the metrics file. Then every rank, whether
its checks passed or not, joins :func:`gossipgrad.engine.agreement.check_settings`: one
all-gather that compares every option that must match (the flags, environment variables and
config file resolved into the TrainConfig, less the rank-local paths), what each rank found
in its data (class names, counts, image counts, steps per epoch), the code and the MPI
thread level. A difference, or a problem on any rank, ends every rank there with one line
naming it and the ranks on each side, before the model, the broadcast or the first step.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Any

from gossipgrad.comm.base import Communicator
from gossipgrad.data.sources import DataSource, open_source
from gossipgrad.engine.agreement import check_settings
from gossipgrad.engine.run.config import RANK_LOCAL, TrainConfig
from gossipgrad.engine.run.membership import check_support
from gossipgrad.engine.run.rundir import RunDirLock, check_writable, preflight

#: The shortest deadline of the start-up comparison (ranks reach it after scanning their
#: data, which takes different times); ``--comm-timeout`` when that is longer.
PREPARE_TIMEOUT_S = 60.0

#: How long one sample may take to read, as a share of ``--comm-timeout``: a rank stuck on a
#: file reports it before its peers' deadlines blame it (or another rank).
READ_SHARE = 0.5


@functools.cache
def code_hash() -> int:
    """A hash of gossipgrad's own source files (different versions on different nodes)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return int.from_bytes(digest.digest()[:8], "little") >> 1


def settings_items(
    cfg: TrainConfig, comm: Communicator, source: DataSource | None
) -> list[tuple[str, Any]]:
    """``(label, value)`` of everything that must be the same on every rank."""
    items: list[tuple[str, Any]] = [("gossipgrad's code (a hash of its files)", code_hash())]
    level = getattr(comm, "thread_multiple", None)
    if level is not None:
        items.append(("the MPI thread level granted (MPI_THREAD_MULTIPLE or not)", level))
    items += [
        ("--" + name.replace("_", "-"), value)
        for name, value in cfg.to_dict().items()
        if name not in RANK_LOCAL
    ]
    if source is not None:
        items += [(f"data: {k}", v) for k, v in getattr(source, "facts", {}).items()]
        items += [
            ("data: classes", source.classes),
            ("data: input shape", tuple(source.in_shape)),
            ("data: steps per epoch", source.steps_per_epoch),
            ("data: name", source.name),
        ]
    return items


def prepare(
    cfg: TrainConfig, comm: Communicator, pin_memory: bool = False
) -> tuple[DataSource, RunDirLock | None]:
    """This rank's data source and (rank 0) the run directory's lock, once every rank has
    agreed (:class:`~gossipgrad.engine.agreement.AgreedError` on every rank otherwise)."""
    source: DataSource | None = None
    lock: RunDirLock | None = None
    problem = None
    run = cfg.run
    try:
        cfg.check_size(comm.size)
        check_support(run.on_failure, comm)
        if comm.rank == 0 and run.run_dir:
            lock = RunDirLock.acquire(run.run_dir)  # first: another job's, say so
            preflight(run.run_dir, run.resume, run.evaluate)
        if comm.rank == 0 and run.metrics_out:
            check_writable(run.metrics_out, "--metrics-out")
        source = open_source(
            cfg.data,
            rank=comm.rank,
            size=comm.size,
            seed=cfg.seed,
            pin_memory=pin_memory,
            read_timeout=READ_SHARE * run.comm_timeout,
        )
    except (ValueError, OSError) as exc:
        problem = re.sub(r"^rank \d+: ", "", str(exc))
    try:
        timeout = max(run.comm_timeout, PREPARE_TIMEOUT_S)
        check_settings(comm, settings_items(cfg, comm, source), problem, timeout, code=2)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    assert source is not None
    return source, lock
