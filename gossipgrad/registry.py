"""The seams' registries: strategies, shapes, timings, topologies, mixing rules, wire codecs,
devices and commands, found by name (the interfaces of what they hold: :mod:`gossipgrad.specs`,
which imports this module, never the reverse). PURE.

Each kind of variation has one home (docs/architecture.md, "Seams"); this module holds only
the name -> object maps and the strategy spec's interface, so that option validation at the
bottom of the layering can find what the layers above registered:

- :data:`STRATEGIES`: :class:`~gossipgrad.specs.StrategySpec` objects (``gossipgrad/strategies/``);
- :data:`RULES`: mixing-rule factories (``gossipgrad/engine/bucket/rules.py``);
- :data:`CODECS`: wire-codec factories (``gossipgrad/comm/codecs.py``).

Importing ``gossipgrad`` registers the built-in ones; a new one is one module that calls
``register`` (load it with ``import``, or with ``GOSSIPGRAD_PLUGINS=module`` for the CLI)::

    >>> reg = Registry("colour", "--colour")
    >>> reg.register("red", "#f00")
    '#f00'
    >>> reg.get("red"), reg.names()
    ('#f00', ('red',))
    >>> reg.get("blue")
    Traceback (most recent call last):
    ...
    ValueError: unknown colour 'blue' (colour); choose one of: red
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from gossipgrad.choices import spell

T = TypeVar("T")


class Registry(Generic[T]):
    """Name -> object, in registration order.

    Args:
        kind: what the objects are, for messages ("strategy").
        field: the option that names one (``"--strategy"``: spelled for the CLI or the
            library by :func:`gossipgrad.choices.spell`).
    """

    def __init__(self, kind: str, field: str) -> None:
        self.kind, self.field = kind, field
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T, *, replace: bool = False) -> T:
        """Add ``item`` under ``name`` and return it. ValueError if the name is taken
        (``replace=True`` overrides: a test or plugin that re-registers on purpose)."""
        if not name or not isinstance(name, str) or name != name.strip():
            raise ValueError(f"a {self.kind} needs a non-empty name without spaces, got {name!r}")
        if name in self._items and not replace:
            raise ValueError(
                f"{self.kind} {name!r} is already registered; pick another name "
                "or pass replace=True"
            )
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove ``name`` (tests that registered a toy)."""
        self._items.pop(name, None)

    def get(self, name: Any) -> T:
        """The object registered as ``name``; ValueError naming the option and the choices.
        A name not registered yet loads the installed plugins first (:func:`load_entry_points`)."""
        key = getattr(name, "value", name)
        if key not in self._items:
            load_entry_points()
        if key not in self._items:
            raise ValueError(
                f"unknown {self.kind} {key!r} ({spell(self.field)}); choose one of: "
                f"{', '.join(self._items)}"
            )
        return self._items[key]

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def __contains__(self, name: object) -> bool:
        key = getattr(name, "value", name)
        if key not in self._items:
            load_entry_points()
        return key in self._items

    def items(self) -> Iterable[tuple[str, T]]:
        return tuple(self._items.items())


ENTRY_POINT_GROUP = "gossipgrad.plugins"
"""Installed packages register into the seams through modules named under this entry point
group (``[options.entry_points] gossipgrad.plugins = NAME = module``); gossipgrad's own tools
(planner, benchmarks, the stand-in device) are one such plugin."""

_loaded = {"done": False}
_loading = threading.Lock()


def load_entry_points() -> list[str]:
    """Import every module of :data:`ENTRY_POINT_GROUP` once (later calls do nothing); the
    names loaded. A module that fails to import is a ValueError naming it."""
    if _loaded["done"]:
        return []
    with _loading:
        if _loaded["done"]:
            return []
        _loaded["done"] = True  # set first: a plugin that looks a name up must not recurse
        from importlib.metadata import entry_points

        names = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()
            except Exception as exc:  # noqa: BLE001 - the plugin's failure, named
                raise ValueError(
                    f"plugin {ep.name!r} ({ep.value}) failed to load: {type(exc).__name__}: {exc}"
                ) from exc
            names.append(ep.name)
        return names


STRATEGIES: Registry[Any] = Registry("strategy", "--strategy")
"""Every ``--strategy``: name -> :class:`StrategySpec`."""

RULES: Registry[Any] = Registry("mixing rule", "--rule")
"""Every ``--rule``: name -> a factory ``(argument: str | None) -> MixingRule``."""

CODECS: Registry[Any] = Registry("wire codec", "--wire")
"""Every ``--wire``: name -> a factory ``() -> Codec``."""

TOPOLOGIES: Registry[Any] = Registry("topology", "--topology")
"""Every ``--topology``: name -> :class:`~gossipgrad.specs.TopologySpec` (built-ins:
``gossipgrad/comm/topologies.py``)."""

SHAPES: Registry[Any] = Registry("exchange shape", "shape")
"""Every exchange shape a strategy names: name -> :class:`~gossipgrad.specs.ShapeSpec`
(built-ins: ``gossipgrad/shapes/``)."""

TIMINGS: Registry[Any] = Registry("timing", "--timing")
"""Every ``--timing``: name -> :class:`~gossipgrad.specs.TimingSpec` (built-ins:
``gossipgrad/engine/bucket/timing/``)."""

DEVICES: Registry[Any] = Registry("device", "--device")
"""Every ``--device NAME[:ARG]`` besides auto, cpu and cuda: name -> :class:`DeviceSpec`."""

COMMANDS: Registry[str] = Registry("command", "gossipgrad COMMAND")
"""Commands of ``gossipgrad`` that plugins add: name -> ``"module:attribute"`` of a click
command, imported only when it runs (the tools' plan, bench, profile and netfit)."""


def lossless(wire: str) -> bool:
    """Whether ``--wire wire`` decodes every value bit for bit (its codec says)."""
    return bool(CODECS.get(wire)().lossless)


def strategy(name: Any) -> Any:
    """The spec of ``--strategy name`` (ValueError listing the choices)."""
    return STRATEGIES.get(name)
