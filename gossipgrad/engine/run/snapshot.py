"""What a checkpoint holds: the consensus model and optimizer, position, RNG and states.

    consensus_(opt, comm)                              # collective: one model, one momentum
    state = snapshot(model, opt, step, steps_per_epoch, meta) if rank == 0 else {}
    Checkpointer(run_dir, comm).save(step, state)      # gossipgrad.engine.run.checkpoint
    step = restore_(path, read(path), model, opt, comm)

The file format and its atomic writing are ``gossipgrad.engine.run.checkpoint``'s.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.run.checkpoint import FORMAT, VERSION, Stateful, cpu, rank_path, read_rank


def average_optimizer_state_(optimizer: torch.optim.Optimizer, comm: Communicator) -> None:
    """Replace floating optimizer state (momentum buffers, ...) by its mean over ranks."""
    if comm.size == 1:
        return
    for pstate in optimizer.state.values():
        for key in sorted(pstate):
            t = pstate[key]
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() > 0:
                host = t.detach().to("cpu", torch.float64).contiguous()
                allreduce_(comm, host).div_(comm.size)
                t.copy_(host.to(t.dtype))


def rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state(
        (n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"])
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def consensus_(opt: Any, comm: Communicator) -> None:
    """Global average of parameters, floating buffers and optimizer state, on every rank."""
    opt.synchronize()
    average_optimizer_state_(opt.optimizer, comm)


def snapshot(
    model: torch.nn.Module,
    opt: Any,
    step: int,
    steps_per_epoch: int,
    meta: dict[str, Any],
    states: dict[str, Stateful] | None = None,
) -> dict[str, Any]:
    """The checkpoint dictionary for ``step`` (call after :func:`consensus_`).

    ``meta`` adds ``compat``, ``config``, ``lr_schedule`` and the like; ``opt`` is a
    ``DistributedOptimizer`` (its ``schedule`` gives the gossip position).
    """
    sched = opt.schedule
    cycle = step // sched.cycle_length if sched.cycle_length else 0
    return {
        "format": FORMAT,
        "version": VERSION,
        "step": step,
        "epoch": step // steps_per_epoch,
        "batch": step % steps_per_epoch,
        "model": cpu(model.state_dict()),
        "optimizer": cpu(opt.optimizer.state_dict()),  # per-rank parts: rank_states
        "schedule": {
            "step": step,
            "cycle": cycle,
            "cycle_length": sched.cycle_length,
            "seed": sched.seed,
            "rotate": sched.rotate,
            "topology": sched.topology,
            "size": sched.size,
        },
        "rng": rng_state(),
        "states": {k: cpu(v.state_dict()) for k, v in (states or {}).items()},
        "rank_states": [],
        **meta,
    }


def restore_(
    path: str,
    state: dict[str, Any],
    model: torch.nn.Module,
    opt: Any,
    comm: Communicator,
    states: dict[str, Stateful] | None = None,
    rank_states: dict[str, Stateful] | None = None,
) -> int:
    """Load ``state`` (read from ``path``) into the model, optimizer and stateful objects.

    Returns the step to continue from. ValueError if the model or optimizer does not fit.
    """
    try:
        model.load_state_dict(state["model"])
    except RuntimeError as exc:
        raise ValueError(
            f"checkpoint {path} holds a different model: {str(exc).splitlines()[0]}"
        ) from None
    step = int(state["step"])
    try:
        opt.step_count = step
        opt.load_state_dict(state["optimizer"])  # a torch state dict: the step is kept
    except (ValueError, KeyError) as exc:
        raise ValueError(
            f"checkpoint {path}: optimizer state does not fit this model ({exc})"
        ) from None
    set_rng_state(state["rng"])
    for name, obj in (states or {}).items():
        if name not in state["states"]:
            raise ValueError(
                f"checkpoint {path} has no {name!r} state; it was written "
                f"without it (saved: {sorted(state['states'])})"
            )
        obj.load_state_dict(state["states"][name])
    if rank_states:
        missing = sorted(set(rank_states) - set(state.get("rank_states", [])))
        if missing:
            raise ValueError(f"checkpoint {path} has no per-rank {missing} state")
        mine = read_rank(rank_path(path, comm.rank))
        for name, obj in rank_states.items():
            obj.load_state_dict(mine[name])
    return step
