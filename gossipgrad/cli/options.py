"""Shared option plumbing: environment variables, ``--config`` files, and the options
several commands share.

Precedence: flag > ``GOSSIPGRAD_<OPTION>`` environment variable > ``--config`` file >
default. click implements exactly this order with ``envvar`` and ``default_map``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from gossipgrad.options import DEFAULT_BUCKET_MB, DEFAULT_TIMEOUT_S


def env_name(option: str) -> str:
    return "GOSSIPGRAD_" + option.lstrip("-").replace("-", "_").upper()


def load_config_file(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """Eager callback for ``--config``: read TOML or YAML into the command's defaults."""
    if not path:
        return path
    if not os.path.isfile(path):
        raise click.BadParameter(f"no such file: {path}", param_hint="--config")
    try:
        if path.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError:
                raise click.BadParameter(
                    "YAML config files need PyYAML: pip install pyyaml; or write the file as TOML",
                    param_hint="--config",
                ) from None
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        else:
            import tomllib

            with open(path, "rb") as f:
                data = tomllib.load(f)
    except (OSError, ValueError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--config") from exc
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a table of options", param_hint="--config")
    known = {p.name for p in ctx.command.params}
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in known:
            raise click.BadParameter(f"{path}: unknown option {key!r}", param_hint="--config")
        defaults[name] = value
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


def stacked(*decorators: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """One decorator applying ``decorators`` as if written in this order, top first."""

    def apply(f: Any) -> Any:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


# The options several benchmarks share, with the library's defaults.
COMM_TIMEOUT = click.option(
    "--comm-timeout",
    type=click.FloatRange(0, min_open=True),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds any wait may take before the job aborts.",
)
BUCKET_MB = click.option(
    "--bucket-mb",
    type=click.FloatRange(0, min_open=True),
    default=DEFAULT_BUCKET_MB,
    show_default=True,
    help="Largest bucket (MiB), as in training.",
)


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


def timed_blocks(
    steps: int, steps_help: str, reps_help: str, warmup_help: str = "Untimed blocks first."
) -> Callable[[Any], Any]:
    """--steps, --reps, --warmup of a benchmark timed in blocks of steps."""
    return stacked(
        click.option(
            "--steps", type=click.IntRange(1), default=steps, show_default=True, help=steps_help
        ),
        click.option(
            "--reps", type=click.IntRange(1), default=3, show_default=True, help=reps_help
        ),
        click.option(
            "--warmup", type=click.IntRange(0), default=1, show_default=True, help=warmup_help
        ),
    )
