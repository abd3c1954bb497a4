"""The outer optimizer as a mixing rule (``--rule outer``, ``outer:sgd``, ``outer:nesterov``).

With local steps (``--timing local:H``) each rank takes H steps of its own optimizer, then
exchanges its parameters once: the bucket is mixed as :class:`~.rules.Average` mixes it (the
peer's model with the schedule's weight, or the mean over ranks for an allreduce), and then
this rule takes an outer step. Its pseudo-gradient is ``g = anchor - mixed``, the model at
the last exchange minus the mixed model now; the new model is

    sgd:       m <- mu m + g;  x <- anchor - lr m
    nesterov:  m <- mu m + g;  x <- anchor - lr (g + mu m)

(torch's SGD and its Nesterov form; ``lr`` is ``--outer-lr``, ``mu`` ``--outer-momentum``).
Over an allreduce with Nesterov at lr 0.7, momentum 0.9 under AdamW this is DiLoCo
(Douillard et al. 2023); over gossip, each rank's outer step follows its own mix with
this step's peer. ``outer:sgd`` at lr 1 without momentum is the plain average::

    >>> import torch
    >>> rule = Outer("sgd", lr=1.0, momentum=0.0)
    >>> anchor, mixed = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 3.0])
    >>> rule.outer_(0, anchor, mixed); mixed.tolist()
    [0.5, 3.0]

The momentum is per rank and per bucket (a rank state: saved with each rank's part of a
checkpoint); a global average of the models averages it too.
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.bucket.rules import Average
from gossipgrad.registry import RULES

KINDS = ("nesterov", "sgd")
"""The outer steps, ``outer:KIND``; the first is the default."""


class Outer(Average):
    """An outer SGD or Nesterov step on the pseudo-gradient after each mix.

    Args:
        kind: ``"nesterov"`` or ``"sgd"``.
        lr: the outer learning rate (> 0).
        momentum: in [0, 1).
    """

    name = "outer"
    outer = True
    stateful = True

    def __init__(self, kind: str = "nesterov", lr: float = 0.7, momentum: float = 0.9) -> None:
        super().__init__(None)
        if kind not in KINDS:
            raise ValueError(
                f"--rule outer:{kind}: the outer step is one of {', '.join(KINDS)} (outer:nesterov)"
            )
        if not lr > 0 or not 0 <= momentum < 1:
            raise ValueError(
                f"the outer rule needs lr > 0 and 0 <= momentum < 1, got {lr}, {momentum}"
            )
        self.kind, self.lr, self.momentum = kind, float(lr), float(momentum)
        self.momenta: dict[int, torch.Tensor] = {}

    def bind(self, options: Any) -> Outer:
        return Outer(self.kind, options.outer_lr, options.outer_momentum)

    def outer_(self, index: int, anchor: torch.Tensor, mixed: torch.Tensor) -> None:
        step = anchor - mixed  # the pseudo-gradient
        if self.momentum:
            m = self.momenta.get(index)
            if m is None or m.shape != step.shape:
                m = self.momenta[index] = torch.zeros_like(step)
            elif m.device != step.device:  # loaded from a checkpoint, on the host
                m = self.momenta[index] = m.to(step.device)
            m.mul_(self.momentum).add_(step)
            if self.kind == "nesterov":
                step.add_(m, alpha=self.momentum)
            else:
                step = m
        torch.sub(anchor, step, alpha=self.lr, out=mixed)

    def average_state_(self, comm: Communicator, identical: bool) -> None:
        if identical or comm.size == 1 or not self.momenta:
            return
        keys = sorted(self.momenta)
        flat = torch.cat([self.momenta[k].reshape(-1).to("cpu", torch.float64) for k in keys])
        allreduce_(comm, flat, what="outer momentum average").div_(comm.size)
        offset = 0
        for k in keys:
            m = self.momenta[k]
            m.copy_(flat[offset : offset + m.numel()].view_as(m).to(m.dtype))
            offset += m.numel()

    def state_values(self) -> int:
        """Values of the momentum buffers (what a merge averages besides the model)."""
        return sum(m.numel() for m in self.momenta.values())

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "lr": self.lr,
            "momentum": self.momentum,
            "momenta": {int(k): m.detach().to("cpu").clone() for k, m in self.momenta.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(
                f"the checkpoint's outer rule is outer:{state.get('kind')}, this run's "
                f"outer:{self.kind}; resume with the same --rule"
            )
        self.momenta = {int(k): m.clone() for k, m in state["momenta"].items()}

    def __repr__(self) -> str:
        return f"Outer({self.kind}, lr={self.lr}, momentum={self.momentum})"


def outer(argument: str | None) -> Outer:
    """``--rule outer`` (Nesterov), ``outer:sgd`` or ``outer:nesterov``; the learning rate
    and momentum come from the options when the optimizer binds it."""
    return Outer(argument or KINDS[0])


RULES.register("outer", outer)
