"""Shared option plumbing: environment variables, ``--config`` files, and the options
several commands share.

Precedence: flag > ``GOSSIPGRAD_<OPTION>`` environment variable > ``--config`` file >
default. click implements exactly this order with ``envvar`` and ``default_map``.
"""

from __future__ import annotations

import copy
import functools
import math
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
    except Exception as exc:  # noqa: BLE001 - OSError, TOML's ValueError, YAML's YAMLError
        detail = " ".join(str(exc).split())
        raise click.BadParameter(f"cannot read {path}: {detail}", param_hint="--config") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{path} must hold a table of options", param_hint="--config")
    params = {p.name: p for p in ctx.command.params}
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in params:
            raise click.BadParameter(f"{path}: unknown option {key!r}", param_hint="--config")
        why = wrong_type(params[name], value)
        if why:
            raise click.BadParameter(f"{path}: {key!r} {why}", param_hint="--config")
        defaults[name] = value
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


def wrong_type(param: click.Parameter, value: Any) -> str | None:
    """Why ``value`` (from a config file) cannot be option ``param``'s value, or None.

    Config files carry typed values, and click would coerce some silently (``int(1.5)`` is
    1, ``int(True)`` is 1) or fail with a traceback (``int([1, 2])``); so the type is
    checked here, by name of file and key.

        >>> import click
        >>> wrong_type(click.Option(["--epochs"], type=int), 1.5)
        'must be a whole number, got 1.5 (float)'
        >>> wrong_type(click.Option(["--lr"], type=float), float("inf"))
        'must be a finite number, got inf'
    """
    kind = param.type
    got = f"{value!r} ({type(value).__name__})"
    if isinstance(param, click.Option) and param.is_flag:
        return None if isinstance(value, bool) else f"must be true or false, got {got}"
    if isinstance(kind, click.types.IntParamType):
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else f"must be a whole number, got {got}"
    if isinstance(kind, click.types.FloatParamType):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be a number, got {got}"
        return None if math.isfinite(value) else f"must be a finite number, got {value!r}"
    if isinstance(kind, click.types.BoolParamType):
        return None if isinstance(value, bool) else f"must be true or false, got {got}"
    if not isinstance(value, str):
        return f"must be a string, got {got}"
    return None


@functools.cache
def _finite(kind: type) -> type:
    """``kind`` (``click.FLOAT``'s class or ``click.FloatRange``) refusing NaN and infinity."""

    class Finite(kind):  # type: ignore[misc, valid-type]
        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            out = super().convert(value, param, ctx)
            if isinstance(out, float) and not math.isfinite(out):
                self.fail(f"{value!r} is not a finite number", param, ctx)
            return out

    Finite.__name__ = Finite.__qualname__ = f"Finite{kind.__name__}"
    return Finite


def refuse_nonfinite(command: click.Command) -> click.Command:
    """Make every float option of ``command`` and its subcommands refuse NaN and infinity
    by the option's name (``--lr nan`` is an error, not a run that ends with loss nan; a
    range check alone lets NaN through: ``nan < 0`` is False); returns ``command``."""
    for param in command.params:
        if isinstance(param.type, click.types.FloatParamType):
            finite = copy.copy(param.type)
            finite.__class__ = _finite(type(param.type))
            param.type = finite
    for sub in getattr(command, "commands", {}).values():
        refuse_nonfinite(sub)
    return command


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
