"""One training step, the same for the trainer and every benchmark contender.

    result = train_step(opt, x, y, loss_fn)       # behind? zero_grad, forward, backward, step
    result.loss, result.skipped, result.seconds["optimizer"]

The protocol, in this order on every rank:

1. ``opt.behind()``: with bounded lag a rank whose peers are far enough ahead skips this
   step's compute (it still takes part in the exchange: ``opt.skip_step()``);
2. ``opt.zero_grad()``;
3. forward through ``opt.module_for_forward`` (DDP's wrapper, else the model) and
   backward, inside ``compute()`` (a context: fault injection, activation offload);
   skipped for an empty batch, which still takes part in the exchange;
4. ``opt.step()`` (or ``opt.skip_step()``): every rank takes part in every exchange.

``seconds`` holds, on this rank, the phases: ``forward`` (with any waits of forward
pre-hooks), ``backward`` (with the hooks that post gradient buckets), ``optimizer``
(``step()``: waits, the update, posting parameter buckets) and ``total``; and the same
step split by what the training thread did (:func:`breakdown`): ``compute`` (forward and
backward less their waits), ``exposed`` (waiting on the wire, wherever it waited; None when
the strategy's waits happen inside another library: DDP, Horovod) and ``host`` (the rest:
the update, packing, hooks).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.comm.base import blocked_seconds
from gossipgrad.engine.protocol import DistributedOptimizerProtocol as DistributedOptimizer
from gossipgrad.engine.protocol import handle

PHASES = ("forward", "backward", "optimizer", "total")
SPLIT = ("compute", "exposed", "host")
"""The step split of :func:`breakdown`, beside the phases in ``StepResult.seconds``."""


@dataclass
class StepResult:
    """What one step did: the loss and output (None when nothing was computed), whether
    the step was skipped to catch up, and the seconds of its phases on this rank."""

    loss: torch.Tensor | None
    output: Any
    skipped: bool
    seconds: dict[str, float] = field(default_factory=dict)


def train_step(
    opt: DistributedOptimizer,
    x: Any,
    y: Any,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    *,
    compute: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
    batch: int | None = None,
) -> StepResult:
    """One step of ``opt`` on ``(x, y)``; ``loss_fn(output, y)`` gives the loss.

    ``batch`` is the number of samples (default ``len(y)``); an empty batch computes
    nothing but still exchanges. Collective: every rank calls it at every step.
    """
    opt = handle(opt)  # the library's face: the engine's optimizer behind it
    skip = opt.behind()
    w0 = blocked_seconds()
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = out = None
    t1 = time.perf_counter()
    if not skip and (len(y) if batch is None else batch):
        with compute():
            out = opt.module_for_forward(x)
            loss = loss_fn(out, y)
            t1 = time.perf_counter()
            loss.backward()
    t2 = time.perf_counter()
    w2 = blocked_seconds()
    if skip:
        opt.skip_step()
    else:
        opt.step()
    t3 = time.perf_counter()
    seconds = {"forward": t1 - t0, "backward": t2 - t1, "optimizer": t3 - t2, "total": t3 - t0}
    seconds.update(breakdown(seconds, w2 - w0, blocked_seconds() - w0, opt.waits_seen))
    return StepResult(loss, out, skip, seconds)


def breakdown(
    seconds: dict[str, float], compute_waits: float, waits: float, seen: bool
) -> dict[str, float | None]:
    """``compute``, ``exposed`` and ``host`` seconds of a step whose phases are ``seconds``,
    the training thread having waited on the wire ``waits`` seconds in all, ``compute_waits``
    of them before ``step()`` (in ``zero_grad``, forward and backward). Unseen waits
    (``seen`` false) leave ``exposed`` None, and they count as compute or host.

    >>> breakdown({"forward": 0.25, "backward": 0.5, "total": 1.0}, 0.125, 0.25, True)
    {'compute': 0.625, 'exposed': 0.25, 'host': 0.125}
    """
    compute = max(0.0, seconds["forward"] + seconds["backward"] - compute_waits)
    if not seen:
        return {"compute": compute, "exposed": None, "host": seconds["total"] - compute}
    host = max(0.0, seconds["total"] - compute - waits)
    return {"compute": compute, "exposed": waits, "host": host}
