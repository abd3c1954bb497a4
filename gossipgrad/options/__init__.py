"""The option table and the frozen option objects every layer takes (the choices:
:mod:`gossipgrad.choices`). PURE.

A setting is declared once, as a field of an option object with its help, flag and
variable (:func:`~gossipgrad.options.table.opt`), parsed and validated where the object is
built, with a message that names the flag; below that it is typed. ``TrainConfig``
(:mod:`gossipgrad.engine.run.config`) composes the groups; ``DistributedOptimizer``, the
library faces, the tools take the same ones.

    >>> [o.flag_name for o in options_of(ShuffleOptions)]
    ['--shuffle', '--shuffle-every', '--shuffle-samples']
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from gossipgrad.choices import *  # noqa: F403 - re-exported: the usual import path
from gossipgrad.options.exchange import (  # noqa: F401
    DEFAULT_BUCKET_MB,
    DEFAULT_MONITOR_EVERY,
    DEFAULT_RULE,
    DEFAULT_SYNC_THRESHOLD,
    DEFAULT_WIRE,
    ExchangeOptions,
    exchange_options,
    mix_follows_strategy,
    wire_refusal,
)
from gossipgrad.options.table import (  # noqa: F401
    Option,
    OptionGroup,
    extras,
    from_env,
    markdown,
    opt,
    options_of,
    register,
    unregister,
)
from gossipgrad.options.training import (  # noqa: F401
    DEFAULT_TIMEOUT_S,
    DataOptions,
    ModelOptions,
    OptimOptions,
    RunOptions,
    ShuffleOptions,
    parse_device,
    parse_partition,
)

GROUPS: dict[str, type] = {
    "optim": OptimOptions,
    "exchange": ExchangeOptions,
    "data": DataOptions,
    "model": ModelOptions,
    "shuffle": ShuffleOptions,
    "run": RunOptions,
}
"""The option groups of a training run, by the attribute that holds each."""


def from_environment(cls: type, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields of option object ``cls`` that ``GOSSIPGRAD_*`` variables set (``environ``,
    default ``os.environ``), parsed; for :class:`ExchangeOptions` the plugins' options too
    (into ``extras``). What both library faces start from.

        >>> from_environment(ExchangeOptions, {"GOSSIPGRAD_MIX": "grad", "GOSSIPGRAD_SEED": "7"})
        {'mix': 'grad', 'seed': 7}
    """
    env = os.environ if environ is None else environ
    out = from_env(env, options_of(cls))
    if cls is ExchangeOptions:
        more = from_env(env, extras())
        if more:
            out["extras"] = tuple(sorted(more.items()))
    return out
