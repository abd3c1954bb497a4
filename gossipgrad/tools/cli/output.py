"""A benchmark's record, printed once by rank 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def run_bench(comm_timeout: float, body: Callable[[Any], dict[str, Any]]) -> None:
    """Start the world, run ``body(comm)`` on every rank, print its record on rank 0;
    abort the job on a failure (a ValueError on one rank is the user's mistake: a usage
    error)."""
    import torch

    from gossipgrad.runtime import call_or_abort, init
    from gossipgrad.tools.bench.common import emit

    torch.set_num_threads(1)
    comm = init(comm_timeout, configure=True)
    try:
        record = call_or_abort(comm, body)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    emit(comm, record)


def output_file(flag: str, help: str) -> Callable:  # noqa: A002 - click's word
    """A ``--flag PATH`` option naming a file the command writes (default: none)."""
    return click.option(flag, type=click.Path(dir_okay=False), default=None, help=help)
