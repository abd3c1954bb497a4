"""AMP's ``GradScaler`` with a distributed optimizer: every rank skips the same steps.

A plain ``GradScaler`` skips ``optimizer.step()`` on a rank whose gradients hold inf/NaN,
and only there: that rank's exchange never happens while its peers wait for it, and its
scale backs off alone. gossipgrad's bucket optimizers say ``_step_supports_amp_scaling``,
so ``GradScaler.step`` calls their ``step()`` on every rank and hands itself over as
``grad_scaler`` (torch's contract for optimizers that handle the scale). ``step()`` then
completes the gradient exchange, unscales (``GradScaler.unscale_``, unless the caller did),
and :func:`agree_skip` agrees with one MAX allreduce whether any rank found inf/NaN,
writing the agreed flag into the scaler's record of this step so that every rank's
``update()`` moves its scale alike. When any rank found one, no rank updates.

Torch warns (``FutureWarning``) that it will stop handing the scaler over; that one
warning is silenced here, because the hand-over is what lets the ranks' scales agree.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_

warnings.filterwarnings(
    "ignore", message="GradScaler is going to stop passing itself", category=FutureWarning
)

AGREEMENT = "the GradScaler's inf/NaN agreement"


def found_inf(scaler: Any, optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The scaler's per-device inf/NaN flags of this step for ``optimizer``, after
    unscaling its gradients (``unscale_``) if the caller has not."""
    from torch.amp.grad_scaler import OptState

    state = scaler._per_optimizer_states[id(optimizer)]
    if state["stage"] is OptState.READY:
        scaler.unscale_(optimizer)
    return list(state["found_inf_per_device"].values())


def agree(comm: Communicator, local: bool, step: int) -> bool:
    """Collective: whether any rank found inf/NaN (one MAX allreduce of one integer)."""
    flag = np.array([1 if local else 0], dtype=np.int64)
    return bool(allreduce_(comm, flag, ReduceOp.MAX, what=AGREEMENT, step=step)[0])


def agree_skip(
    comm: Communicator, scaler: Any, optimizer: torch.optim.Optimizer, step: int
) -> bool:
    """Collective: True when any rank's gradients hold inf/NaN (skip the update); the
    scaler's flags then say so on every rank, so its ``update()`` agrees too."""
    flags = found_inf(scaler, optimizer)
    skip = agree(comm, any(bool(f.item()) for f in flags), step)
    for f in flags:
        f.fill_(1.0 if skip else 0.0)
    return skip
