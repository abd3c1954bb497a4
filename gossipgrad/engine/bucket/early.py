"""Per-bucket optimizer steps from backward: the parameter mix's update and send, moved from
``step()`` to the moment a bucket's gradient is complete (``timing="early"``).

With the parameter mix a bucket's update reads only that bucket's gradient and state when
the optimizer updates element by element (SGD, momentum, Adam, AdamW ...:
:func:`gossipgrad.engine.optim.updates_elementwise`). So the shell may update a bucket as
soon as backward has completed its gradient and post its new values to this step's peer
at once: the exchange then runs behind the rest of backward and the next forward (whose
pre-hooks wait for each bucket), and the result is lockstep's, to float rounding.

What breaks the per-bucket update is anything that changes the gradients, or the optimizer's
settings, between ``backward()`` and ``step()`` (a global-norm clip, ``GradScaler``'s
unscale and skip), or a step that runs backward itself (``step(closure)``), or an optimizer
that reads whole parameters. Those are found, not assumed:

- an optimizer not known to update element by element: never (``why_not`` says so);
- the first step (and the first after ``load_state_dict``) runs in lockstep's order while
  :class:`EarlySteps` watches; a closure, a GradScaler, or gradients or settings that changed
  between the end of backward and ``step()`` turn the per-bucket update off for the run
  (logged once, with the reason): every later step runs in lockstep's order;
- once on, the same findings at a later step raise one line naming the fix, because the
  update already used what was changed afterwards.

    >>> import torch
    >>> w = torch.nn.Parameter(torch.ones(3)); w.grad = torch.ones(3)
    >>> steps = EarlySteps(torch.optim.SGD([w], lr=0.5), rank=0)
    >>> steps.update_([w]); w.tolist()
    [0.5, 0.5, 0.5]
"""

from __future__ import annotations

import enum
import logging
from typing import Any

import torch

from gossipgrad.engine.optim import updates_elementwise

log = logging.getLogger(__name__)


class Mode(enum.Enum):
    WATCH = "watch"  # lockstep's order, deciding from what this step shows
    ON = "on"  # buckets updated from backward
    OFF = "off"  # lockstep's order for the rest of the run


class EarlySteps:
    """Updates some buckets' parameters with the wrapped optimizer, and decides whether the
    per-bucket update is valid for this loop.

    Args:
        optimizer: the wrapped torch optimizer (its ``param_groups`` are swapped for the
            bucket's share of them during one update, and restored).
        rank: for messages.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, rank: int) -> None:
        self.optimizer, self.rank = optimizer, rank
        self.why_not: str | None = None
        if not updates_elementwise(optimizer):
            self.why_not = (
                f"{type(optimizer).__name__} is not known to update element by element "
                "(gossipgrad.engine.optim.updates_elementwise)"
            )
        self.mode = Mode.OFF if self.why_not else Mode.WATCH
        self.updated: set[int] = set()  # buckets updated from backward this step
        self.backward_steps = 0  # steps that updated some bucket from backward
        self._versions: list[int] | None = None  # the gradients' at the end of backward
        self._settings: list[dict[str, Any]] | None = None

    @property
    def on(self) -> bool:
        return self.mode is Mode.ON

    def update_(self, params: list[torch.Tensor]) -> None:
        """One optimizer step over ``params`` only, each with its own group's settings."""
        chosen = {id(p) for p in params}
        groups = self.optimizer.param_groups
        share = [dict(g, params=[p for p in g["params"] if id(p) in chosen]) for g in groups]
        self.optimizer.param_groups = [g for g in share if g["params"]]
        try:
            self.optimizer.step()
        finally:
            self.optimizer.param_groups = groups

    def sealed(self, grads: list[torch.Tensor]) -> None:
        """The end of a backward pass that completed a bucket: what ``step()`` compares."""
        self._versions = [g._version for g in grads]
        self._settings = _settings(self.optimizer)

    def _changed(self, grads: list[torch.Tensor]) -> str | None:
        if self._versions is None:
            return None
        if [g._version for g in grads] != self._versions:
            return "the gradients changed between backward() and step() (a clip? an unscale?)"
        if not _same(self._settings, _settings(self.optimizer)):
            return "the optimizer's settings changed between backward() and step()"
        return None

    def before_step(self, step: int, closure: Any, scaler: Any, grads: list[torch.Tensor]) -> None:
        """At ``step()``, before the update: raises when buckets were updated from backward
        and this step shows what that update could not see; while watching, decides."""
        why = (
            "step(closure) runs backward inside step()"
            if closure is not None
            else "a GradScaler drives the steps (it may unscale or skip after backward)"
            if scaler is not None
            else self._changed(grads)
        )
        if self.updated:
            if why is not None:
                raise RuntimeError(
                    f"rank {self.rank}, step {step}: {why}, after timing='early' updated "
                    "parameter buckets from backward; do the same from the first step on "
                    "(it then runs in lockstep's order), or pass timing='lockstep'"
                )
            self.backward_steps += 1
        elif self.mode is Mode.WATCH and why is not None:
            self.mode = Mode.OFF
            self.why_not = why
            log.info("timing='early' runs in lockstep's order for this run: %s", why)
        elif self.mode is Mode.WATCH and self._versions is not None:
            self.mode = Mode.ON

    def after_step(self) -> None:
        self.updated.clear()
        self._versions = self._settings = None


def _settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def _same(a: Any, b: Any) -> bool:
    """Equal settings (a tensor's by value; anything else by ``==`` or identity)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    return a is b or a == b
