"""Metrics: JSON-lines records (rank 0 writes) and the rank-0 progress bar.

Every line is strict JSON (RFC 8259: no bare ``NaN`` or ``Infinity``, which strict parsers
refuse): a non-finite number is written as the string ``"nan"``, ``"inf"`` or ``"-inf"``
(:func:`to_json`). A file is only ever appended to: each run starts with an ``"event":
"start"`` record (``resumed_from``: the checkpoint it continues, or null), so a resumed run's
file holds the whole history; the records of the latest run follow the last start record.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import Any


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``"nan"``, ``"inf"`` or ``"-inf"``.

    >>> strict({"loss": float("nan"), "x": [1.0, float("-inf")]})
    {'loss': 'nan', 'x': [1.0, '-inf']}
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def to_json(record: dict[str, Any]) -> str:
    """One record as strict JSON (:func:`strict`), keys sorted."""
    return json.dumps(strict(record), sort_keys=True, allow_nan=False)


class MetricsWriter:
    """Appends one JSON object per line to ``path`` (rank 0 only; others write nothing).

    The file is never truncated: a run appends to what earlier runs wrote (a resumed run
    continues their history). A last line left unfinished (a rank 0 that died mid-write) is
    cut off first, so a record is never half-read. ``append`` is kept for callers that say
    so explicitly (the survivors' new rank 0 after the old one died). A file that cannot be
    written raises OSError naming ``path`` and the cause.
    """

    def __init__(self, path: str | None, rank: int, append: bool = True) -> None:
        self._file = None
        self.path = path
        if path and rank == 0:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                _cut_torn_line(path)
                self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise OSError(exc.errno, f"--metrics-out {path}: {exc.strerror}") from None

    @property
    def active(self) -> bool:
        return self._file is not None

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            try:
                self._file.write(to_json(record) + "\n")
                self._file.flush()
            except OSError as exc:
                raise OSError(
                    exc.errno, f"cannot write metrics to {self.path}: {exc.strerror}"
                ) from None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _cut_torn_line(path: str) -> None:
    """Truncate ``path`` after its last newline (no-op for a missing or whole file)."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        pass


class Progress:
    """A tqdm bar on rank 0 when enabled; silent elsewhere."""

    def __init__(
        self, total: int, rank: int, enabled: bool, initial: int = 0, desc: str = "train"
    ) -> None:
        self.bar = None
        self.rank = rank
        if enabled and rank == 0:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total,
                initial=initial,
                desc=desc,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5,
            )

    def update(self, n: int = 1, **postfix: Any) -> None:
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix(postfix, refresh=False)

    def write(self, message: str) -> None:
        if self.bar is not None:
            self.bar.write(message, file=sys.stderr)
        elif self.rank == 0:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Throughput:
    """Images per second over training steps.

    The first step (warm-up: allocation, first loader batch) and every interval inside
    :meth:`paused` (evaluation, checkpoints) are left out; data loading is counted.
    """

    def __init__(self, images_per_step: int) -> None:
        self.images_per_step = images_per_step
        self.start = time.perf_counter()
        self.mark: float | None = None
        self.timed, self.steps = 0.0, 0

    def tick(self) -> None:
        """Call once after every training step."""
        now = time.perf_counter()
        if self.mark is not None:
            self.timed += now - self.mark
            self.steps += 1
        self.mark = now

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        try:
            yield
        finally:
            if self.mark is not None:
                self.mark = time.perf_counter()

    def images_per_s(self) -> float:
        return self.steps * self.images_per_step / self.timed if self.timed > 0 else 0.0

    def wall(self) -> float:
        return time.perf_counter() - self.start


class StepSplit:
    """Where this rank's steps went (:func:`gossipgrad.engine.step.breakdown`): compute,
    exposed wire (waiting on the wire) and host (the update, packing, hooks), mean seconds
    a step. The first step (warm-up; it also waits for every rank to start) is left out.

    >>> s = StepSplit()
    >>> for exposed in (9.0, 0.25, 0.75):
    ...     s.add({"compute": 1.0, "exposed": exposed, "host": 0.5, "total": 1.5 + exposed})
    >>> s.means()["step_exposed_wire_seconds"], s.means()["step_seconds"]
    (0.5, 2.0)
    >>> s.describe()
    '2 s = compute 1 + exposed wire 0.5 + host 0.5 (this rank, mean of 2 steps)'
    """

    def __init__(self) -> None:
        self.warm = False  # the first step came and was left out
        self.steps = 0
        self.sums = {"compute": 0.0, "exposed": 0.0, "host": 0.0, "total": 0.0}
        self.unseen = False  # a strategy whose waits gossipgrad does not see (DDP, Horovod)

    def add(self, seconds: dict[str, float | None]) -> None:
        if not self.warm:
            self.warm = True
            return
        self.steps += 1
        for key in self.sums:
            self.sums[key] += seconds[key] or 0.0
        self.unseen = self.unseen or seconds["exposed"] is None

    def means(self) -> dict[str, float | None]:
        """The summary's fields (None before the second step; exposed None when unseen)."""
        n = self.steps
        mean = {k: round(v / n, 6) if n else None for k, v in self.sums.items()}
        return {
            "step_compute_seconds": mean["compute"],
            "step_exposed_wire_seconds": None if self.unseen else mean["exposed"],
            "step_host_seconds": mean["host"],
            "step_seconds": mean["total"],
        }

    def describe(self) -> str:
        m = self.means()
        wire = m["step_exposed_wire_seconds"]
        parts = [f"compute {m['step_compute_seconds']:.3g}"]
        parts += [f"exposed wire {wire:.3g}"] if wire is not None else []
        parts += [f"host {m['step_host_seconds']:.3g}"]
        unseen = "; the library's waits on the wire are inside these" if wire is None else ""
        return (
            f"{m['step_seconds']:.3g} s = {' + '.join(parts)} "
            f"(this rank, mean of {self.steps} steps{unseen})"
        )
