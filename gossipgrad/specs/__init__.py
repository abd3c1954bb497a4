"""The interfaces behind the registries (:mod:`gossipgrad.registry`): what a strategy, a
device, a topology, a timing and an exchange shape say about themselves. PURE: stdlib only.

A new one is one module that subclasses a spec here and registers an instance::

    STRATEGIES.register("mine", Mine())   # class Mine(StrategySpec)
"""

from gossipgrad.specs.device import DeviceSpec
from gossipgrad.specs.shape import ExchangeLoad, ShapeSpec
from gossipgrad.specs.strategy import COMMON_FIELDS, NEUTRAL, StrategySpec
from gossipgrad.specs.timing import TimingSpec
from gossipgrad.specs.topology import TopologySpec

__all__ = [
    "COMMON_FIELDS",
    "NEUTRAL",
    "DeviceSpec",
    "ExchangeLoad",
    "ShapeSpec",
    "StrategySpec",
    "TimingSpec",
    "TopologySpec",
]
