"""The command line of the option table (:mod:`gossipgrad.options.table`): each option's
click option made from its one declaration, ``--config`` files typed by it, and the options
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

from gossipgrad.options import (
    GROUPS,
    ExchangeOptions,
    Option,
    RunOptions,
    extras,
    options_of,
)


def env_name(option: str) -> str:
    return "GOSSIPGRAD_" + option.lstrip("-").replace("-", "_").upper()


def train_table() -> list[Option]:
    """Every option of ``gossipgrad train``, in ``--help``'s order: the model (the
    :class:`~gossipgrad.engine.run.config.TrainConfig`'s own fields), the groups, then what
    plugins registered."""
    from gossipgrad.engine.run.config import TrainConfig

    out = options_of(TrainConfig, "arch")
    for name, group in GROUPS.items():
        out += options_of(group, name)
    return out + extras()


def table_option(name: str) -> Option:
    """The option ``name`` of the table (KeyError names it)."""
    for o in train_table():
        if o.name == name:
            return o
    raise KeyError(f"no option {name!r} in the table")


def click_option(option: Option, **override: Any) -> Callable[[Any], Any]:
    """The click option of ``option``: its flag and aliases, type or choices, default,
    help and variable (``override``: click arguments a command sets differently)."""
    flag, kind = option.flag_name, option.kind
    decls = [flag, *option.aliases, option.name]
    kw: dict[str, Any] = {"default": option.default, "help": option.text}
    if kind is bool:
        if not option.aliases:
            decls = [f"{flag}/--no-{flag[2:]}", option.name]
        else:
            kw["is_flag"] = True
    elif option.valid_choices() is not None:
        kw["type"] = click.Choice(option.valid_choices())
    else:
        kw["type"] = kind if kind in (int, float) else str
    if isinstance(option.default, tuple):  # a comma-separated list (--offload)
        kw["default"] = ",".join(option.default) or "none"
    kw["show_default"] = option.show_default or True
    if option.metavar:
        kw["metavar"] = option.metavar
    kw.update(envvar=option.env, show_envvar=True)
    kw.update(override)
    return click.option(*decls, **kw)


def table_options(options: list[Option]) -> Callable[[Any], Any]:
    """One decorator with the click option of every option of ``options`` that belongs
    on the command line, in order."""
    return stacked(*(click_option(o) for o in options if o.cli))


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
    table = {o.name: o for o in train_table()}
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name not in params:
            raise click.BadParameter(f"{path}: unknown option {key!r}", param_hint="--config")
        why = table[name].value_error(value) if name in table else wrong_type(params[name], value)
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


# The options several benchmarks share: the training run's, from the table.
POSITIVE = click.FloatRange(0, min_open=True)  # checked as the benchmark parses its flags
COMM_TIMEOUT = click_option(options_of(RunOptions)[0], envvar=None, type=POSITIVE)
BUCKET_MB = click_option(
    next(o for o in options_of(ExchangeOptions) if o.name == "bucket_mb"),
    help="Largest bucket (MiB), as in training.",
    envvar=None,
    type=POSITIVE,
)
GOSSIP_MIX = click.option(
    "--mix",
    type=click.Choice(["param", "grad"]),
    default="param",
    show_default=True,
    help="What gossip mixes (allreduce always averages gradients).",
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
