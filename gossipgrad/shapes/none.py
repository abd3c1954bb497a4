"""``none``: nothing moves (``local``, and any strategy at one rank). PURE."""

from __future__ import annotations

from typing import Any

from gossipgrad.comm.transport import Transport
from gossipgrad.registry import SHAPES
from gossipgrad.specs import ShapeSpec


class NoExchange(ShapeSpec):
    name = "none"
    summary = "nothing moves"
    moves = False
    exchange_factor = None

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Transport:
        return Transport(comm, stager)


SHAPES.register(NoExchange.name, NoExchange(), replace=True)
