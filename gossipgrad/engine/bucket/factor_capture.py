"""Capturing a Linear layer's sufficient factors: its inputs X and output gradients dY.

A forward hook (:meth:`FactorLayer.capture`) keeps the input, flattened to ``K x N``, and
puts a hook on the output that keeps its gradient, ``K x M``, when backward reaches it. A
forward with no backward (or under ``torch.no_grad``) leaves no pair; several forwards and
backward passes before the exchange (gradient accumulation, a layer called twice) give
several pairs, which concatenate along ``K``. Nothing is copied: the pairs hold the tensors
autograd already keeps, until the exchange has packed them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.comm.factors import FactorPending
from gossipgrad.engine.bucket.factor_rules import Decision


@dataclass(eq=False)
class FactorLayer:
    """One eligible Linear layer and this step's captured (X, dY) pairs."""

    index: int
    name: str
    module: torch.nn.Linear
    pairs: list[list[torch.Tensor | None]] = field(default_factory=list)  # [X, dY or None]
    decision: Decision | None = None
    ready: bool = False  # its weight gradient is accumulated (overlap)
    posted: bool = False
    pending: FactorPending | None = None
    hooks: list[Any] = field(default_factory=list)

    def unhook(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks = []

    @property
    def weight(self) -> torch.nn.Parameter:
        return self.module.weight

    def capture(
        self, module: torch.nn.Module, args: tuple, kwargs: dict[str, Any], output: torch.Tensor
    ) -> None:
        """Forward hook (``with_kwargs=True``): keep X; hook the output for dY (only when a
        backward can follow)."""
        if (
            not torch.is_grad_enabled()
            or not isinstance(output, torch.Tensor)
            or not output.requires_grad
        ):
            return
        x = args[0] if args else kwargs["input"]
        pair: list[torch.Tensor | None] = [x.detach().reshape(-1, self.module.in_features), None]
        self.pairs.append(pair)

        def keep(grad: torch.Tensor) -> None:
            pair[1] = grad.detach().reshape(-1, self.module.out_features)

        output.register_hook(keep)

    def rows_captured(self) -> int:
        """Rows of every forward this step (an upper bound on what backward will use)."""
        return sum(int(x.shape[0]) for x, _ in self.pairs)

    def factors(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(dYs, Xs) of the forwards that had a backward."""
        done = [(dy, x) for x, dy in self.pairs if dy is not None]
        return [dy for dy, _ in done], [x for _, x in done]

    def grad(self) -> torch.Tensor:
        """The weight's gradient tensor (made zero if autograd has not made one)."""
        w = self.weight
        if w.grad is None:
            w.grad = torch.zeros_like(w)
        return w.grad


def eligible_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Linear]]:
    """``(name, module)`` of every exact ``torch.nn.Linear`` whose weight requires a gradient
    and is registered in no other module, in registration order."""
    owners: dict[int, int] = {}
    for _, module in model.named_modules():
        for p in module.parameters(recurse=False):
            owners[id(p)] = owners.get(id(p), 0) + 1
    return [
        (name or "<model>", m)
        for name, m in model.named_modules()
        if type(m) is torch.nn.Linear and m.weight.requires_grad and owners[id(m.weight)] == 1
    ]
