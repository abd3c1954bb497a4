"""No non-finite number goes unnoticed: the loss at every step, the model at every checkpoint,
a checkpoint before it is resumed.

- **Loss.** :func:`note_loss` (every step, free: the loss is already a Python float for the
  log) turns a NaN or infinite loss into a stop request with the code ``DIVERGED + step``;
  the per-step stop agreement carries it to every rank (MAX of one int64, the allreduce that
  SIGTERM already uses), so every rank learns it at the same step and
  :func:`raise_if_diverged` ends the job there with one line, before any checkpoint.
- **Checkpoint.** :func:`check_model_` runs after the global average and before anything is
  written: one MAX allreduce of a flag, so every rank refuses together. A non-finite model
  is never written, so pruning never deletes a good checkpoint in favour of a bad one.
- **Resume.** :func:`check_checkpoint` refuses a file whose model or optimizer state holds a
  non-finite value (written by an older version after a divergence, or altered), naming the
  tensor and the count.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.agreement import AgreedError

DIVERGED = 1 << 40
"""Stop codes at or above this mean "a rank saw a non-finite loss at step code - DIVERGED"
(signal numbers are below 64, so MAX over ranks keeps the divergence and its latest step)."""

HINT = "lower --lr (or warm up: --warmup-epochs), or resume from an earlier checkpoint"


def note_loss(signals: Any, loss: float, step: int) -> None:
    """Ask every rank to stop if ``loss`` (step ``step``'s, on this rank) is not finite."""
    if not math.isfinite(loss):
        signals.received = max(signals.received, DIVERGED + step)


def raise_if_diverged(stopped: int) -> None:
    """AgreedError on every rank if the agreed stop code is a divergence."""
    if stopped >= DIVERGED:
        step = stopped - DIVERGED
        raise AgreedError(
            f"training diverged: the loss was not finite (nan or inf) at step {step}; "
            f"stopped every rank there, nothing saved after it; {HINT}"
        )


def first_nonfinite(named: Any) -> str | None:
    """``"name: k of n nan/inf"`` for the first floating tensor of ``(name, tensor)`` pairs
    holding a non-finite value, else None."""
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            bad = ~torch.isfinite(t.detach())
            if bool(bad.any()):
                return f"{name}: {int(bad.sum())} of {t.numel()} values nan or inf"
    return None


def _model_and_optimizer(model: torch.nn.Module, optimizer: Any) -> list[tuple[str, Any]]:
    named = list(model.state_dict().items())
    names = {id(p): n for n, p in model.named_parameters()}
    for p, state in getattr(optimizer, "state", {}).items():
        for key, t in state.items():
            named.append((f"optimizer {key} of {names.get(id(p), '?')}", t))
    return named


def check_model_(
    model: torch.nn.Module, optimizer: Any, comm: Communicator, step: int, run_dir: str
) -> None:
    """Collective, before a checkpoint is written: AgreedError on every rank if any rank's
    model or optimizer state holds a non-finite value."""
    bad = first_nonfinite(_model_and_optimizer(model, optimizer))
    flag = np.array([bad is not None], dtype=np.int64)
    if comm.size > 1:
        allreduce_(comm, flag, ReduceOp.MAX, what="checkpoint check", step=step)
    if flag[0]:
        where = f" ({bad})" if bad else " (on another rank)"
        raise AgreedError(
            f"step {step}: the model is not finite{where}: training diverged; no checkpoint "
            f"written at step {step}, the earlier ones in {run_dir} are kept; {HINT}"
        )


def check_checkpoint(state: dict[str, Any], path: str) -> None:
    """ValueError if checkpoint ``state`` (read from ``path``) holds a non-finite value in
    its model or optimizer state."""
    named = list(state.get("model", {}).items())
    for pid, pstate in state.get("optimizer", {}).get("state", {}).items():
        named += [(f"optimizer {key} of parameter {pid}", t) for key, t in pstate.items()]
    bad = first_nonfinite(named)
    if bad:
        raise ValueError(
            f"checkpoint {path} is not finite ({bad}): it was written after a divergence or "
            "altered; resume from an earlier checkpoint (pass --resume FILE) or start afresh"
        )
