"""Options the lab's benchmark studies share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gossipgrad.cli.options import stacked


def mlp_model(batch: int) -> Callable[[Any], Any]:
    """--width, --layers, --batch: the benchmark MLP and its samples per rank per step."""
    return stacked(
        click.option("--width", type=click.IntRange(1), default=512, show_default=True),
        click.option("--layers", type=click.IntRange(1), default=4, show_default=True),
        click.option(
            "--batch",
            type=click.IntRange(1),
            default=batch,
            show_default=True,
            help="Samples per rank per step.",
        ),
    )
