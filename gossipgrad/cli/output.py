"""Where a command's result goes: a file (``--out``) or stdout; a benchmark's record,
printed once by rank 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def write_output(text: str, out: str | None) -> None:
    """Write ``text`` plus a newline to ``out``, or echo it when ``out`` is None; an
    unwritable path becomes a one-line error (exit code 1), not a traceback."""
    if out is None:
        click.echo(text)
        return
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc}") from exc


def run_bench(comm_timeout: float, body: Callable[[Any], dict[str, Any]]) -> None:
    """Start the world, run ``body(comm)`` on every rank, print its record on rank 0;
    abort the job on a failure (a ValueError on one rank is the user's mistake: a usage
    error)."""
    import torch

    from gossipgrad.bench.common import emit
    from gossipgrad.runtime import call_or_abort, init

    torch.set_num_threads(1)
    comm = init(comm_timeout)
    try:
        record = call_or_abort(comm, body)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    emit(comm, record)
