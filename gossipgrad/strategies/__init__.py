"""Strategies: one module per strategy, each a small spec object
(:class:`gossipgrad.specs.StrategySpec`) registered in
:data:`gossipgrad.registry.STRATEGIES`; :func:`DistributedOptimizer` builds any of them.

Adding a strategy is one module: subclass ``StrategySpec`` (or :class:`BucketStrategy`
for one that moves one bucket at a time), say which options it reads and what it
supports, write ``build``, and call ``STRATEGIES.register(name, spec)``. Import it before
use, or name it in ``GOSSIPGRAD_PLUGINS`` for the command line.

    >>> from gossipgrad.registry import STRATEGIES
    >>> STRATEGIES.names()[:7]  # the built-in ones (plugins register after them)
    ('gossip', 'allreduce', 'allreduce-param', 'local', 'ps', 'horovod', 'ddp')
    >>> STRATEGIES.get("gossip").shape, STRATEGIES.get("allreduce").collective
    ('peer', True)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gossipgrad.options import ExchangeOptions
from gossipgrad.registry import STRATEGIES
from gossipgrad.specs import COMMON_FIELDS, StrategySpec
from gossipgrad.strategies.bucketed import BucketStrategy

# isort: off
from gossipgrad import shapes  # noqa: F401, E402 - the exchange shapes the strategies name

# registration, in the order --help lists them
from gossipgrad.strategies import gossip  # noqa: F401, E402
from gossipgrad.strategies import allreduce  # noqa: F401, E402
from gossipgrad.strategies import allreduce_param  # noqa: F401, E402
from gossipgrad.strategies import local  # noqa: F401, E402
from gossipgrad.strategies import ps  # noqa: F401, E402
from gossipgrad.strategies import horovod  # noqa: F401, E402
from gossipgrad.strategies import ddp  # noqa: F401, E402
from gossipgrad.strategies import gossip_node  # noqa: F401, E402
# isort: on

from gossipgrad.strategies.face import (  # noqa: E402
    DistributedOptimizer,
    build_optimizer,
    handle,
)

__all__ = [
    "BucketStrategy",
    "DistributedOptimizer",
    "StrategySpec",
    "STRATEGIES",
    "build_optimizer",
    "handle",
    "options_for",
]


def options_for(
    strategy: str, base: ExchangeOptions | None = None, **fields: Any
) -> ExchangeOptions:
    """Exchange options for ``strategy`` from ``base``'s fields and ``fields``, keeping only
    those the strategy reads: how a benchmark runs every contender with the launch's
    settings where they apply (a setting a strategy does not read would be refused).

    >>> options_for("ddp", mix="grad", bucket_mb=4, max_lag=2).bucket_mb
    4
    >>> options_for("gossip", mix="grad", max_lag=2).max_lag
    2
    """
    spec = STRATEGIES.get(strategy)
    values = (
        {} if base is None else {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    )
    values.update(fields)
    keep = {
        k: v
        for k, v in values.items()
        if k != "strategy" and (k in spec.uses or k in COMMON_FIELDS)
    }
    return ExchangeOptions(strategy=spec.name, **keep)
