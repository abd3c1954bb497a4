"""What every leaf module of a model returns, per call: found once on the meta device.

    calls = trace_calls(model, (3, 224, 224))   # {"conv1": [Call(...)], "relu": [...x3]...}

The model runs one forward in training mode on a meta input of one sample, with its
parameters and buffers swapped for meta tensors (``torch.func.functional_call``: nothing is
copied, nothing computed, the model is unchanged). A forward hook on each leaf module
records, per call in order, the structure of its output and each tensor's shape and dtype.
Other hooks on the model run as well: trace before wrapping the model in a distributed
optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import TreeSpec, tree_flatten


@dataclass(frozen=True)
class Call:
    """One call of a leaf: its output's tree structure and, per flattened leaf of it, a
    ``(shape, dtype)`` for a tensor or the value itself for anything else."""

    spec: TreeSpec
    outputs: tuple[Any, ...]


def leaf_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """``(qualified name, module)`` of every module without children, in registration
    order (a module registered under two names is listed once, by its first name)."""
    seen: set[int] = set()
    out = []
    for name, m in model.named_modules():
        if next(m.children(), None) is None and id(m) not in seen:
            seen.add(id(m))
            out.append((name, m))
    return out


def trace_calls(
    model: torch.nn.Module, sample_shape: tuple[int, ...], batch: int = 1
) -> dict[str, list[Call]]:
    """Each leaf's calls in one training forward of a ``batch`` x ``sample_shape`` input.

    Raises ``ValueError`` naming the model when its forward cannot run on the meta device.
    """
    calls: dict[str, list[Call]] = {}
    hooks = []
    for name, m in leaf_modules(model):

        def record(_m: torch.nn.Module, _args: Any, out: Any, name: str = name) -> None:
            flat, spec = tree_flatten(out)
            outs = tuple(
                (tuple(t.shape), t.dtype) if isinstance(t, torch.Tensor) else t for t in flat
            )
            calls.setdefault(name, []).append(Call(spec, outs))

        hooks.append(m.register_forward_hook(record))
    state = {
        k: v.detach().to("meta")
        for k, v in [*model.named_parameters(), *model.named_buffers()]
        if v is not None
    }
    x = torch.empty(batch, *sample_shape, device="meta")
    was_training = model.training
    model.train()
    try:
        torch.func.functional_call(model, state, (x,), tie_weights=True)
    except Exception as exc:  # noqa: BLE001 - any failure here means: cannot stand in
        raise ValueError(
            f"the stand-in could not trace {type(model).__name__} on the meta device with "
            f"input {'x'.join(map(str, (batch, *sample_shape)))}: {exc}"
        ) from exc
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return calls
