"""A toy mixing rule, registered from the tests alone: the peer's weight is 0.3 (not the
schedule's 1/2). ``--rule toy30`` after ``import toy_rule`` (``GOSSIPGRAD_PLUGINS=toy_rule``
for the command line)."""

from __future__ import annotations

from gossipgrad.engine.bucket.rules import Average
from gossipgrad.registry import RULES

NAME = "toy30"


class ThirtyPercent(Average):
    """``x <- 0.7 x + 0.3 x_peer`` at every mixing step (idle steps mix nothing)."""

    name = NAME

    def __init__(self) -> None:
        super().__init__(0.3)


RULES.register(NAME, lambda argument: ThirtyPercent(), replace=True)
