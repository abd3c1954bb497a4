"""The face's exchange options from the environment: a Horovod script passes none, so
``GOSSIPGRAD_<OPTION>`` (the variables of ``gossipgrad train``'s flags: ``GOSSIPGRAD_STRATEGY``,
``GOSSIPGRAD_MIX``, ``GOSSIPGRAD_MAX_LAG`` ...) choose them. Precedence: the keyword of
``DistributedOptimizer`` > the variable > the face's defaults (:data:`FACE_DEFAULTS`).

    >>> exchange_from_env({"GOSSIPGRAD_STRATEGY": "allreduce", "GOSSIPGRAD_MAX_LAG": "2",
    ...                    "GOSSIPGRAD_OVERLAP": "0", "GOSSIPGRAD_SEED": "7"})
    {'strategy': 'allreduce', 'overlap': False, 'max_lag': 2, 'seed': 7}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gossipgrad.options import ExchangeOptions

FACE_DEFAULTS: dict[str, Any] = {"strategy": "gossip"}
"""Gossip, mixing what suits the optimizer (``options.default_mix``; docs/guide.md,
"Choosing strategy, mix and lag")."""

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _parse(name: str, text: str, default: Any) -> Any:
    if isinstance(default, bool):
        value = text.strip().lower()
        if value not in _TRUE | _FALSE:
            raise ValueError(f"GOSSIPGRAD_{name.upper()}={text!r}: expected 1 or 0")
        return value in _TRUE
    for kind in (int, float):
        if isinstance(default, kind):
            try:
                return kind(text)
            except ValueError:
                raise ValueError(
                    f"GOSSIPGRAD_{name.upper()}={text!r}: expected a {kind.__name__}"
                ) from None
    return text.strip()


def exchange_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """The :class:`ExchangeOptions` fields set in ``environ``, parsed (validated later,
    where the options are built)."""
    out = {}
    for f in dataclasses.fields(ExchangeOptions):
        text = environ.get(f"GOSSIPGRAD_{f.name.upper()}")
        if text is not None:
            default = f.default if f.default is not None else ""
            out[f.name] = _parse(f.name, text, getattr(default, "value", default))
    return out
