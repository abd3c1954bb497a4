"""Environment settings: every ``GOSSIPGRAD_*`` variable that is not a training flag, read
once, in one place. PURE: stdlib only.

Training flags have variables of their own, ``GOSSIPGRAD_<OPTION>`` (flag > variable >
``--config`` file > default; ``gossipgrad train --help`` lists them). The variables below
tune the runtime and the test harness; ``gossipgrad train --help`` shows this table too.

    >>> s = Settings.from_env({"GOSSIPGRAD_WAIT_SPIN_S": "0.25"})
    >>> s.wait_spin_s, s.progress_burst
    (0.25, 16)
    >>> Settings.from_env({"GOSSIPGRAD_PROGRESS_BURST": "many"})
    Traceback (most recent call last):
    ...
    ValueError: GOSSIPGRAD_PROGRESS_BURST='many': expected a whole number >= 1, e.g. 16
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


def _flag(text: str) -> bool:
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected 1 or 0")


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError
    return value


def _level(text: str) -> str:
    value = text.strip().lower()
    if value not in {"single", "funneled", "serialized", "multiple"}:
        raise ValueError
    return value


def _comm_wait(text: str) -> bool:
    value = text.strip().lower()
    if value not in {"poll", "block"}:
        raise ValueError
    return value == "block"


def _slow(text: str) -> tuple[int, float]:
    rank, _, factor = text.partition(":")
    pair = int(rank), float(factor)
    if pair[0] < 0 or not (pair[1] >= 1 and math.isfinite(pair[1])):
        raise ValueError
    return pair


KILL_POINTS = ("step", "shuffle", "eval", "checkpoint")
"""Where ``GOSSIPGRAD_INJECT_KILL`` may kill a rank (see ``gossipgrad.engine.faults``)."""


def _kills(text: str) -> tuple[tuple[int, int, str], ...]:
    kills = []
    for item in text.split(","):
        rank, step, *where = item.strip().split(":")
        kill = int(rank), int(step), (where[0] if where else "step")
        if kill[0] < 0 or kill[1] < 0 or kill[2] not in KILL_POINTS or len(where) > 1:
            raise ValueError
        kills.append(kill)
    return tuple(kills)


@dataclass(frozen=True)
class Variable:
    """One environment variable: its field in :class:`Settings`, parser, example, meaning."""

    name: str
    field: str
    parse: Callable[[str], Any]
    example: str
    default: str
    help: str


VARIABLES: tuple[Variable, ...] = (
    Variable("GOSSIPGRAD_MPI", "force_mpi", _flag, "1", "detected",
             "1: use MPI even without a launcher's variables; 0: never"),
    Variable("GOSSIPGRAD_THREADS", "threads", _count, "4", "cores // ranks on the node",
             "torch intra-op threads per rank"),
    Variable("OMP_NUM_THREADS", "omp_threads", _count, "1", "unset",
             "honoured when GOSSIPGRAD_THREADS is unset"),
    Variable("GOSSIPGRAD_WAIT_SPIN_S", "wait_spin_s", _seconds, "0", "1.0, or 0 when ranks "
             "outnumber cores", "seconds the training thread polls a wait before backing off"),
    Variable("GOSSIPGRAD_PROGRESS_BURST", "progress_burst", _count, "16", "16",
             "MPI tests per poll before sleeping (too few starve a fast link)"),
    Variable("GOSSIPGRAD_POLL_MAX_PAUSE_S", "poll_max_pause_s", _seconds, "1e-3", "1e-3",
             "longest sleep between polls"),
    Variable("GOSSIPGRAD_COMM_WAIT", "comm_block", _comm_wait, "block", "poll",
             "how the communication thread waits for a gossip exchange: poll (MPI_Test in "
             "bursts, sleeping between) or block (MPI_Wait; needs MPI_THREAD_MULTIPLE)"),
    Variable("GOSSIPGRAD_MPI_THREAD_LEVEL", "mpi_thread_level", _level, "serialized",
             "multiple", "thread level asked of MPI (below multiple, calls are serialised)"),
    Variable("GOSSIPGRAD_CUDA_AWARE", "cuda_aware", _flag, "1", "asked of MPI",
             "whether MPI takes CUDA pointers (else device buffers go through host copies)"),
    Variable("GOSSIPGRAD_INJECT_DELAY_MS", "inject_delay_ms", _seconds, "5", "0",
             "one-way latency added to every point-to-point send (the emulated cluster)"),
    Variable("GOSSIPGRAD_INJECT_SLOW", "inject_slow", _slow, "3:2", "none",
             "RANK:FACTOR: that rank's compute takes FACTOR times as long (straggler tests)"),
    Variable("GOSSIPGRAD_INJECT_KILL", "inject_kill", _kills, "3:40:shuffle", "none",
             "RANK:STEP[:WHERE],...: that launch rank SIGKILLs itself at that step, WHERE one "
             "of step (default), shuffle, eval, checkpoint (failure tests)"),
    Variable("OMPI_MCA_mpi_ft_enable", "ompi_ft", _flag, "1", "unset",
             "set by Open MPI's mpiexec --with-ft ulfm: ULFM is on (--on-failure continue)"),
    Variable("GOSSIPGRAD_EMU_RATE", "emu_rate", str, "1gbit", "none",
             "link rate label set by scripts/emucluster.py (recorded by benchmarks)"),
    Variable("GOSSIPGRAD_EMU_NETNS", "emu_netns", str, "gg123-0", "none",
             "set by scripts/emucluster.py: this rank's network namespace"),
)


@dataclass(frozen=True)
class Settings:
    """The parsed variables (None: unset, the runtime decides)."""

    force_mpi: bool | None = None
    threads: int | None = None
    omp_threads: int | None = None
    wait_spin_s: float | None = None
    progress_burst: int = 16
    poll_max_pause_s: float = 1e-3
    comm_block: bool = False
    mpi_thread_level: str = "multiple"
    cuda_aware: bool | None = None
    inject_delay_ms: float = 0.0
    inject_slow: tuple[int, float] | None = None
    inject_kill: tuple[tuple[int, int, str], ...] = ()
    ompi_ft: bool = False
    emu_rate: str | None = None
    emu_netns: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Parse ``environ`` (default ``os.environ``); ValueError names a bad variable."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for v in VARIABLES:
            text = env.get(v.name)
            if text is None or not text.strip():
                continue
            try:
                values[v.field] = v.parse(text.strip())
            except ValueError:
                kind = {_count: "a whole number >= 1", _seconds: "a number >= 0",
                        _flag: "1 or 0", _slow: "RANK:FACTOR with FACTOR >= 1",
                        _kills: "RANK:STEP[:WHERE] (WHERE: " + ", ".join(KILL_POINTS) + ")",
                        _comm_wait: "poll or block",
                        _level: "single, funneled, serialized or multiple"}.get(v.parse, "text")
                raise ValueError(f"{v.name}={text!r}: expected {kind}, e.g. "
                                 f"{v.example}") from None
        return cls(**values)


@functools.cache
def settings() -> Settings:
    """The process's settings, read from the environment on first use."""
    return Settings.from_env()


def table_markdown() -> str:
    """The variables as a markdown table (docs/architecture.md carries it)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default} | {v.help} |" for v in VARIABLES]
    return "\n".join(rows)


def table_text() -> str:
    """The variables as plain text, for ``--help``."""
    return "\n".join(f"{v.name}: {v.help} (default: {v.default})" for v in VARIABLES)
