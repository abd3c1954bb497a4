"""Environment settings: every ``GOSSIPGRAD_*`` variable that is not a training flag, read
once, in one place: their table is ``gossipgrad/settings.toml`` (name, kind, example, default,
meaning), shipped with the package. PURE: stdlib only.

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
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any


def _flag(text: str) -> bool:
    """1 or 0"""
    value = text.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError("expected 1 or 0")


def _count(text: str) -> int:
    """a whole number >= 1"""
    value = int(text)
    if value < 1:
        raise ValueError
    return value


def _seconds(text: str) -> float:
    """a number >= 0"""
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError
    return value


def _deadline(text: str) -> float:
    """a number of seconds > 0"""
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError
    return value


def _level(text: str) -> str:
    """single, funneled, serialized or multiple"""
    value = text.strip().lower()
    if value not in {"single", "funneled", "serialized", "multiple"}:
        raise ValueError
    return value


def _comm_wait(text: str) -> bool:
    """poll or block"""
    value = text.strip().lower()
    if value not in {"poll", "block"}:
        raise ValueError
    return value == "block"


def _slow(text: str) -> tuple[int, float]:
    """RANK:FACTOR with FACTOR >= 1"""
    rank, _, factor = text.partition(":")
    pair = int(rank), float(factor)
    if pair[0] < 0 or not (pair[1] >= 1 and math.isfinite(pair[1])):
        raise ValueError
    return pair


KILL_POINTS = ("step", "shuffle", "eval", "checkpoint", "respawn")
"""Where ``GOSSIPGRAD_INJECT_KILL`` may kill a rank (see ``gossipgrad.inject.faults``)."""


def _kills(text: str) -> tuple[tuple[int, int, str], ...]:
    kills = []
    for item in text.split(","):
        rank, step, *where = item.strip().split(":")
        kill = int(rank), int(step), (where[0] if where else "step")
        if kill[0] < 0 or kill[1] < 0 or kill[2] not in KILL_POINTS or len(where) > 1:
            raise ValueError
        kills.append(kill)
    return tuple(kills)


def _text(text: str) -> str:
    """text"""
    return text


_kills.__doc__ = "RANK:STEP[:WHERE] (WHERE: " + ", ".join(KILL_POINTS) + ")"
_KINDS: dict[str, Callable[[str], Any]] = {
    f.__name__.lstrip("_"): f
    for f in (_flag, _count, _seconds, _deadline, _level, _comm_wait, _slow, _kills, _text)
}
"""How a variable's text is parsed, by the ``kind`` its table row names; each parser's
docstring says what a valid value looks like (for the error)."""


@dataclass(frozen=True)
class Variable:
    """One environment variable: its field in :class:`Settings`, kind, example, meaning."""

    name: str
    field: str
    kind: str
    example: str
    default: str
    help: str

    def parse(self, text: str) -> Any:
        return _KINDS[self.kind](text)


def _load_table() -> tuple[Variable, ...]:
    """The rows of ``settings.toml`` (shipped with the package)."""
    text = resources.files("gossipgrad").joinpath("settings.toml").read_text(encoding="utf-8")
    rows = tuple(Variable(**row) for row in tomllib.loads(text)["variable"])
    unknown = [v.name for v in rows if v.kind not in _KINDS]
    if unknown:
        raise RuntimeError(f"gossipgrad/settings.toml: unknown kind for {unknown}")
    return rows


VARIABLES: tuple[Variable, ...] = _load_table()
"""Every variable, in the order of ``gossipgrad/settings.toml`` (the one place they are
described)."""


@dataclass(frozen=True)
class Settings:
    """The parsed variables (None: unset, the runtime decides)."""

    force_mpi: bool | None = None
    threads: int | None = None
    omp_threads: int | None = None
    wait_spin_s: float | None = None
    progress_burst: int = 16
    ps_push_pool_mb: int | None = None
    ranks_per_node: int | None = None
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
    plugins: str | None = None
    start_timeout_s: float | None = None

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
                kind = _KINDS[v.kind].__doc__
                raise ValueError(f"{v.name}={text!r}: expected {kind}, e.g. {v.example}") from None
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
