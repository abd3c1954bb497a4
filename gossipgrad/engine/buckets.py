"""Flat buckets: several parameters' gradients (or values) in one contiguous buffer.

Parameters are grouped in reverse registration order, which approximates the order in which
backward produces their gradients, into buckets of at most ``cap_bytes`` (a parameter larger
than the cap gets a bucket of its own). After :meth:`BucketLayout.bind_grads_` every
``p.grad`` is a view into its bucket, so exchanging a bucket exchanges those gradients with
no copy; :meth:`BucketLayout.bind_params_` does the same for ``p.data``. Parameters passed
in ``exclude`` (weights whose gradients travel as sufficient factors, ``engine.factors``)
get no bucket: their ``p.grad`` stays autograd's own tensor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.devices.clock import host_waited


@dataclass
class Bucket:
    """One flat buffer and the parameters that live in it, in layout order."""

    index: int
    params: list[torch.nn.Parameter]
    offsets: list[int]
    numel: int
    grads: torch.Tensor | None = None
    values: torch.Tensor | None = None
    param_ids: set[int] = field(default_factory=set)

    @property
    def nbytes(self) -> int:
        return self.numel * self.params[0].element_size()


class BucketLayout:
    """Assigns trainable parameters to buckets; binds grads/values to flat storage.

    Args:
        params: the model's parameters (frozen ones, ``requires_grad=False``, are skipped).
        cap_bytes: the largest bucket, in bytes (> 0).
        exclude: ids of parameters to leave out (there may then be no bucket at all).
    """

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        cap_bytes: int,
        exclude: frozenset[int] = frozenset(),
    ) -> None:
        if cap_bytes <= 0:
            raise ValueError(f"bucket size must be > 0 bytes, got {cap_bytes}")
        trainable = [p for p in params if p.requires_grad]
        if not trainable:
            raise ValueError("the model has no trainable parameters")
        self.buckets: list[Bucket] = []
        current: list[torch.nn.Parameter] = []
        size = 0
        for p in reversed([p for p in trainable if id(p) not in exclude]):
            nbytes = p.numel() * p.element_size()
            if current and (size + nbytes > cap_bytes or _kind(p) != _kind(current[0])):
                self._close(current)
                current, size = [], 0
            current.append(p)
            size += nbytes
        if current:
            self._close(current)

    def _close(self, params: list[torch.nn.Parameter]) -> None:
        offsets, total = [], 0
        for p in params:
            offsets.append(total)
            total += p.numel()
        self.buckets.append(
            Bucket(len(self.buckets), params, offsets, total, param_ids={id(p) for p in params})
        )

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    def bind_grads_(self) -> None:
        """Give every bucket a zeroed gradient buffer and make each ``p.grad`` a view of it."""
        for b in self.buckets:
            p0 = b.params[0]
            b.grads = torch.zeros(b.numel, dtype=p0.dtype, device=p0.device)
            for p, off in zip(b.params, b.offsets, strict=True):
                p.grad = b.grads[off : off + p.numel()].view_as(p)

    def bind_params_(self) -> None:
        """Move parameter values into flat buffers; each ``p.data`` becomes a view."""
        for b in self.buckets:
            p0 = b.params[0]
            b.values = torch.empty(b.numel, dtype=p0.dtype, device=p0.device)
            for p, off in zip(b.params, b.offsets, strict=True):
                view = b.values[off : off + p.numel()].view_as(p)
                view.copy_(p.data)
                p.data = view

    def grads_bound(self) -> bool:
        """False if someone replaced a ``p.grad`` (e.g. ``zero_grad(set_to_none=True)``)."""
        for b in self.buckets:
            for p, off in zip(b.params, b.offsets, strict=True):
                g = p.grad
                if g is None or g.data_ptr() != b.grads[off:].data_ptr():
                    return False
        return True


def _kind(p: torch.Tensor) -> tuple:
    return (p.dtype, p.device)


def install_forward_waits(
    model: torch.nn.Module, bucket_of: dict[int, int], wait: Callable[[list[int]], None]
) -> list[Any]:
    """A forward pre-hook on every module that owns bucketed parameters (``bucket_of``:
    ``id(p)`` -> bucket index): before the module runs, ``wait(its buckets)``. Returns the
    hook handles. Each wait is reported to a stand-in device's clock (a no-op otherwise)."""
    wait = _reported(wait)
    hooks = []
    for module in model.modules():
        own = sorted(
            {bucket_of[id(p)] for p in module.parameters(recurse=False) if id(p) in bucket_of}
        )
        if own:
            hooks.append(module.register_forward_pre_hook(lambda _m, _args, own=own: wait(own)))
    return hooks


def install_global_forward_waits(
    bucket_of: dict[int, int], wait: Callable[[list[int]], None]
) -> list[Any]:
    """As :func:`install_forward_waits`, for parameters whose modules the optimizer was not
    given (Horovod's optimizer gets the parameters only): one global forward pre-hook
    (``torch.nn.modules.module.register_module_forward_pre_hook``) waits, before any
    module runs, for the buckets of the parameters it owns. Returns the hook handle."""
    wait = _reported(wait)
    owned: dict[int, list[int]] = {}

    def hook(module: torch.nn.Module, _args: Any) -> None:
        own = owned.get(id(module))
        if own is None:
            own = owned[id(module)] = sorted(
                {bucket_of[id(p)] for p in module.parameters(recurse=False) if id(p) in bucket_of}
            )
        if own:
            wait(own)

    return [torch.nn.modules.module.register_module_forward_pre_hook(hook)]


def _reported(wait: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
    """``wait``, and its wall-clock span told to :func:`~gossipgrad.devices.clock.host_waited`:
    on the stand-in device, the layer after a wait that blocked cannot start before it ended
    (the stand-in runs each layer synchronously, so it cannot see that by itself)."""

    def timed(own: list[int]) -> None:
        start = time.perf_counter()
        wait(own)
        host_waited(start, time.perf_counter())

    return timed
