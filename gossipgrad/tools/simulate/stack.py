"""Replicas stacked: every rank's parameters as one tensor ``[size, *shape]`` per parameter.

Forward and backward run all ranks at once (``torch.func.functional_call`` under
``vmap``: rank r's loss reads only row r, so the gradient of the sum is every rank's own
gradient, row by row), and one torch optimizer steps the stack. For an optimizer whose
update of an element reads only that element's gradient and state (SGD, Adam, AdamW:
:func:`gossipgrad.engine.optim.updates_elementwise`) that is rank r's optimizer on row r;
its state (momentum, Adam's moments) is the stack of the ranks' states. Models with
buffers (BatchNorm's statistics) or randomness (dropout) run on the ``ranks`` engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.func import functional_call, vmap

from gossipgrad.tools.simulate.runtime import BucketLayout

EVAL_CHUNK = 1024
"""Test samples per forward in an evaluation (bounds its memory)."""


class Replicas:
    """``size`` copies of ``model`` (its parameters now are every rank's start).

    Args:
        model: the template (read for its structure and initial values; not trained).
        size: ranks.
        optimizer: builds the torch optimizer over a list of tensors.
        loss_fn: ``loss_fn(output, target)``, a mean over the batch.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        size: int,
        optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        if any(True for _ in model.buffers()):
            raise ValueError(
                "the stack engine runs models without buffers (BatchNorm keeps running "
                "statistics per rank); use engine='ranks'"
            )
        self.model, self.size, self.loss_fn = model, size, loss_fn
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.frozen = {n: p.detach() for n, p in model.named_parameters() if not p.requires_grad}
        self.params = {
            n: p.detach().unsqueeze(0).repeat(size, *[1] * p.dim()).requires_grad_(True)
            for n, p in model.named_parameters()
            if p.requires_grad
        }
        self.optimizer = optimizer(list(self.params.values()))
        self._loss = vmap(self._one_loss, randomness="error")

    def _one_loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor):
        out = functional_call(self.model, {**params, **self.frozen}, (x,))
        return self.loss_fn(out, y)

    @property
    def values(self) -> list[torch.Tensor]:
        """Every parameter's stack, detached (written in place by the exchange)."""
        return [self.params[n].data for n in self.names]

    @property
    def grads(self) -> list[torch.Tensor]:
        return [self.params[n].grad for n in self.names]

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Every rank's loss on its batch ``x[r], y[r]``; gradients set (zeroed first)."""
        for p in self.params.values():
            p.grad = None
        losses = self._loss(self.params, x, y)
        losses.sum().backward()
        return losses.detach()

    def step(self, lr: float, hold: torch.Tensor | None = None) -> None:
        """One optimizer step at ``lr``; the ranks in ``hold`` (a bool mask) keep their
        parameters and optimizer state as if they had taken none."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        if hold is None or not bool(hold.any()):
            self.optimizer.step()
            return
        rows = torch.nonzero(hold).flatten()
        before = self._state_tensors()
        kept = [(t, t[rows].clone()) for t in self.values + before]
        self.optimizer.step()
        for t, old in kept:
            t[rows] = old
        known = {id(t) for t in before}
        for t in self._state_tensors():  # state born in this step: as if never made there
            if id(t) not in known:
                t[rows] = 0

    def _state_tensors(self) -> list[torch.Tensor]:
        """The optimizer's per-element state tensors (momentum, moments)."""
        out = []
        for p in self.params.values():
            for v in self.optimizer.state.get(p, {}).values():
                if isinstance(v, torch.Tensor) and v.shape == p.shape:
                    out.append(v)
        return out

    def average_(self) -> None:
        """Every rank <- the mean over ranks, computed in float64 as the runtime's global
        average (``engine.consensus.average_parameters_``) is."""
        for v in self.values:
            v.copy_(v.double().mean(0, keepdim=True).to(v.dtype).expand_as(v))

    def mean(self) -> dict[str, torch.Tensor]:
        return {n: self.params[n].detach().double().mean(0).float() for n in self.names}

    def flat(self) -> torch.Tensor:
        """``[size, P]``: every rank's parameters, in ``model.parameters()`` order."""
        return torch.cat([v.reshape(self.size, -1) for v in self.values], dim=1)


def bucket_spans(model: torch.nn.Module, names: list[str], cap_bytes: int) -> list[list[tuple]]:
    """The runtime's bucket layout over ``names``: per bucket, ``(name, start, stop)``
    spans of each parameter's flat elements, in the order the flat bucket holds them."""
    by_id = {id(p): n for n, p in model.named_parameters()}
    params = [p for n, p in model.named_parameters() if n in names]
    layout = BucketLayout(params, cap_bytes, split=False)
    return [[(by_id[id(p)], 0, p.numel()) for p in b.params] for b in layout.buckets]


def gather_bucket(stacks: dict[str, torch.Tensor], spans: list[tuple], rank: int) -> torch.Tensor:
    """Rank ``rank``'s flat bucket from the stacks (a copy)."""
    return torch.cat([stacks[n][rank].reshape(-1)[a:b] for n, a, b in spans])


def scatter_bucket(
    stacks: dict[str, torch.Tensor], spans: list[tuple], rank: int, flat: torch.Tensor
) -> None:
    """Write rank ``rank``'s flat bucket back into the stacks."""
    off = 0
    for n, a, b in spans:
        stacks[n][rank].view(-1)[a:b].copy_(flat[off : off + b - a])
        off += b - a


def distance(values: list[torch.Tensor]) -> float:
    """The consensus distance of stacked parameters: mean over ranks of ``||x_i - x̄||² /
    ||x̄||²`` (``engine.consensus.consensus_distance``'s; differences in the parameters'
    precision, each rank's sum in it too, the rest in float64)."""
    size = values[0].shape[0]
    if size == 1:
        return 0.0
    num = den = 0.0
    with torch.no_grad():
        for v in values:
            mean = v.mean(0)
            rows = (v - mean).pow_(2).reshape(size, -1).sum(1)  # one float32 sum a rank
            num += float(rows.double().sum())
            den += float(mean.double().pow_(2).sum())
    num /= size
    return num / den if den > 0 else num


@torch.no_grad()
def accuracy(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[..., torch.Tensor],
) -> tuple[float, float]:
    """(accuracy, mean loss) of ``model`` with ``params`` on ``x, y``."""
    correct, loss = 0.0, 0.0
    for i in range(0, len(y), EVAL_CHUNK):
        out = functional_call(model, params, (x[i : i + EVAL_CHUNK],))
        yy = y[i : i + EVAL_CHUNK]
        correct += float((out.argmax(1) == yy).sum())
        loss += float(loss_fn(out, yy)) * len(yy)
    return correct / max(1, len(y)), loss / max(1, len(y))


@torch.no_grad()
def rank_accuracies(
    model: torch.nn.Module,
    stacked: dict[str, torch.Tensor],
    frozen: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
) -> list[float]:
    """Each stacked rank's accuracy on ``x, y`` (all ranks at once)."""

    def hits(params: dict[str, Any], xx: torch.Tensor, yy: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, {**params, **frozen}, (xx,))
        return (out.argmax(1) == yy).sum()

    n = next(iter(stacked.values())).shape[0]
    correct = torch.zeros(n)
    chunk = max(1, EVAL_CHUNK * 8 // max(1, n))
    for i in range(0, len(y), chunk):
        xx, yy = x[i : i + chunk], y[i : i + chunk]
        correct += vmap(hits, in_dims=(0, None, None))(stacked, xx, yy).float()
    return (correct / max(1, len(y))).tolist()
