"""Flat buckets: several parameters' gradients (or values) in one contiguous buffer.

Parameters are grouped in reverse registration order, which approximates the order in which
backward produces their gradients, into buckets of at most ``cap_bytes`` (a parameter larger
than the cap gets a bucket of its own, or with ``split`` several: equal parts of it, each
no larger than the cap, whose buffers are consecutive slices of one flat buffer of the
parameter, so ``p.grad`` stays one view). After :meth:`BucketLayout.bind_grads_` every
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
    span: tuple[int, int] | None = None  # a part of params[0] only: its elements lo..hi

    @property
    def nbytes(self) -> int:
        return self.numel * self.params[0].element_size()


class BucketLayout:
    """Assigns trainable parameters to buckets; binds grads/values to flat storage.

    Args:
        params: the model's parameters (frozen ones, ``requires_grad=False``, are skipped).
        cap_bytes: the largest bucket, in bytes (> 0).
        exclude: ids of parameters to leave out (there may then be no bucket at all).
        split: a parameter larger than the cap becomes several buckets (parts of it).
    """

    def __init__(
        self,
        params: list[torch.nn.Parameter],
        cap_bytes: int,
        exclude: frozenset[int] = frozenset(),
        split: bool = False,
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
            if split and nbytes > cap_bytes:
                if current:
                    self._close(current)
                    current, size = [], 0
                self._split(p, cap_bytes)
                continue
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

    def _split(self, p: torch.nn.Parameter, cap_bytes: int) -> None:
        """Parts of ``p`` of at most ``cap_bytes`` each, as equal as its elements allow."""
        n = p.numel()
        k = min(n, -(-(n * p.element_size()) // cap_bytes))
        bounds = [n * i // k for i in range(k + 1)]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            index = len(self.buckets)
            self.buckets.append(Bucket(index, [p], [0], hi - lo, param_ids={id(p)}, span=(lo, hi)))

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    def buckets_of(self) -> dict[int, list[int]]:
        """``id(p)`` -> the indices of the buckets holding (parts of) ``p``."""
        found: dict[int, list[int]] = {}
        for b in self.buckets:
            for p in b.params:
                found.setdefault(id(p), []).append(b.index)
        return found

    def bind_grads_(self) -> None:
        """Give every bucket a zeroed gradient buffer and make each ``p.grad`` a view of it."""
        whole: dict[int, torch.Tensor] = {}  # a split parameter's flat buffer
        for b in self.buckets:
            p0 = b.params[0]
            if b.span is not None:
                flat = whole.get(id(p0))
                if flat is None:
                    flat = whole[id(p0)] = torch.zeros(p0.numel(), dtype=p0.dtype, device=p0.device)
                    p0.grad = flat.view_as(p0)
                b.grads = flat[b.span[0] : b.span[1]]
                continue
            b.grads = torch.zeros(b.numel, dtype=p0.dtype, device=p0.device)
            for p, off in zip(b.params, b.offsets, strict=True):
                p.grad = b.grads[off : off + p.numel()].view_as(p)

    def bind_params_(self) -> None:
        """Move parameter values into flat buffers; each ``p.data`` becomes a view."""
        whole: dict[int, torch.Tensor] = {}
        for b in self.buckets:
            p0 = b.params[0]
            if b.span is not None:
                flat = whole.get(id(p0))
                if flat is None:
                    flat = whole[id(p0)] = torch.empty(p0.numel(), dtype=p0.dtype, device=p0.device)
                    flat.copy_(p0.data.reshape(-1))
                    p0.data = flat.view_as(p0)
                b.values = flat[b.span[0] : b.span[1]]
                continue
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
                if g is None:
                    return False
                if b.span is not None:  # p.grad is the whole parameter's flat buffer
                    if not g.is_contiguous() or g.reshape(-1)[b.span[0] :].data_ptr() != (
                        b.grads.data_ptr()
                    ):
                        return False
                elif g.data_ptr() != b.grads[off:].data_ptr():
                    return False
        return True


def _kind(p: torch.Tensor) -> tuple:
    return (p.dtype, p.device)


def install_forward_waits(
    model: torch.nn.Module, bucket_of: dict[int, int], wait: Callable[[list[int]], None]
) -> list[Any]:
    """A forward pre-hook on every module that owns bucketed parameters (``bucket_of``:
    ``id(p)`` -> bucket index, or the indices of the buckets holding its parts): before the
    module runs, ``wait(its buckets)``. Returns the hook handles. Each wait is reported to a
    stand-in device's clock (a no-op otherwise)."""
    wait = _reported(wait)
    hooks = []
    for module in model.modules():
        own = sorted(
            {
                b
                for p in module.parameters(recurse=False)
                if id(p) in bucket_of
                for b in _as_list(bucket_of[id(p)])
            }
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


def _as_list(found: int | list[int]) -> list[int]:
    return found if isinstance(found, list) else [found]


WAIT_OBSERVERS: list[Callable[[float, float], None]] = []
"""Told ``(start, end)`` (``time.perf_counter``) of every forward wait for a parameter bucket.
A simulated device registers here (the stand-in's clock: the layer after a wait that
blocked cannot start before it ended, which a device run synchronously cannot see)."""


def _reported(wait: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
    """``wait``, and its wall-clock span told to every :data:`WAIT_OBSERVERS` entry."""

    def timed(own: list[int]) -> None:
        start = time.perf_counter()
        wait(own)
        if WAIT_OBSERVERS:
            end = time.perf_counter()
            for observe in WAIT_OBSERVERS:
                observe(start, end)

    return timed
