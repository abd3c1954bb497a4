"""Shared option plumbing: environment variables and ``--config`` files.

Precedence: flag > ``GOSSIPGRAD_<OPTION>`` environment variable > ``--config`` file >
default. click implements exactly this order with ``envvar`` and ``default_map``.
"""

from __future__ import annotations

import os
from typing import Any

import click


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
                raise click.BadParameter("YAML config files need PyYAML: pip install pyyaml; "
                                         "or write the file as TOML",
                                         param_hint="--config") from None
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
