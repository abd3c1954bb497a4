"""GeePS-style memory management: ``--offload activations`` and ``--offload optimizer``.

    offload = ActivationOffload(model, device)
    with offload.saving():                       # tensors saved for backward go to host
        loss = loss_fn(model(x), y)
        loss.backward()                          # ... and come back, one ahead of use
    opt = HostOffloadOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))

Activations: ``torch.autograd.graph.saved_tensors_hooks``. Packing a saved tensor copies it
to host memory and drops the device copy; unpacking copies it back for backward. On CUDA
the host buffers are pinned and copies run on a side stream: a forward copy overlaps the
next layers' compute (at most ``depth`` = 2 in flight: double buffering, the device memory
of older ones is released), and backward prefetches the previous saved tensor while the
current one is used. Parameters (and views of them) stay where they are, as do tensors
smaller than ``min_bytes``. On a CPU-only host the same code path runs with plain copies:
the values, and so the results, are identical to running without it.

Optimizer: :class:`HostOffloadOptimizer` keeps host copies of the parameters, their
gradients and the whole optimizer state (pinned on CUDA) and runs the update there:
per step the parameters and gradients go to host, the wrapped optimizer steps, the
parameters come back (3 x the parameter bytes over the bus). On CPU the copies are plain
and the update is the wrapped optimizer's, so results are bit-identical. ``--strategy ps``
unwraps it: each owner keeps its shard's master copy and optimizer state in host memory.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

from gossipgrad.engine.optim import rebuild
from gossipgrad.options import Offload

log = logging.getLogger(__name__)

MIN_BYTES = 64 * 1024
"""Saved tensors smaller than this stay on the device (a copy costs more than it frees)."""


class _Packed:
    """A saved tensor in host memory (and its prefetched device copy, in backward)."""

    __slots__ = ("host", "device", "ready", "index", "prefetched", "ahead")

    def __init__(self, host: torch.Tensor, device: torch.device, index: int) -> None:
        self.host, self.device, self.index = host, device, index
        self.ready: Any = None  # CUDA event: the device-to-host copy is done
        self.prefetched: torch.Tensor | None = None
        self.ahead: Any = None  # CUDA event: the prefetch is done


class ActivationOffload:
    """Moves tensors saved for backward to host memory while ``saving()`` is active.

    Args:
        model: its parameters are never moved (nor tensors that share their storage).
        device: the model's device.
        min_bytes: smaller saved tensors stay where they are.
        depth: device-to-host copies in flight at once (CUDA).

    ``bytes_to_host`` / ``tensors_to_host`` count what was moved over all ``saving()``
    blocks; ``last_bytes`` is the last block's.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str,
        min_bytes: int = MIN_BYTES,
        depth: int = 2,
    ) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.min_bytes, self.depth = min_bytes, depth
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._side = torch.cuda.Stream(self.device) if self.cuda else None
        self._inflight: deque[tuple[_Packed, torch.Tensor]] = deque()
        self._packed: list[_Packed] = []
        self.bytes_to_host = 0
        self.tensors_to_host = 0
        self.last_bytes = 0

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """Offload what autograd saves inside the block (forward and backward of a step)."""
        self._packed, self.last_bytes = [], 0
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield
        finally:
            self._inflight.clear()
            self._packed = []

    def _keep(self, t: torch.Tensor) -> bool:
        return (
            t.device != self.device
            or t.numel() * t.element_size() < self.min_bytes
            or t.untyped_storage().data_ptr() in self._params
        )

    def _pack(self, t: torch.Tensor) -> Any:
        if self._keep(t):
            return t
        host = torch.empty(t.shape, dtype=t.dtype, layout=t.layout, pin_memory=self.cuda)
        packed = _Packed(host, t.device, len(self._packed))
        if self.cuda:
            self._side.wait_stream(torch.cuda.current_stream(self.device))
            t.record_stream(self._side)  # its memory is not reused before the copy has run
            with torch.cuda.stream(self._side):
                host.copy_(t, non_blocking=True)
                packed.ready = torch.cuda.Event()
                packed.ready.record(self._side)
            self._inflight.append((packed, t))  # t stays alive until its copy is done
            while len(self._inflight) > self.depth:
                done, _ = self._inflight.popleft()
                done.ready.synchronize()
        else:
            host.copy_(t)
        self._packed.append(packed)
        nbytes = t.numel() * t.element_size()
        self.bytes_to_host += nbytes
        self.last_bytes += nbytes
        self.tensors_to_host += 1
        return packed

    def _unpack(self, packed: Any) -> torch.Tensor:
        if not isinstance(packed, _Packed):
            return packed
        if packed.prefetched is not None:
            out, packed.prefetched = packed.prefetched, None
            torch.cuda.current_stream(self.device).wait_event(packed.ahead)
            out.record_stream(torch.cuda.current_stream(self.device))
        else:
            if packed.ready is not None:
                torch.cuda.current_stream(self.device).wait_event(packed.ready)
            out = packed.host.to(packed.device, non_blocking=self.cuda)
        if self.cuda and 0 < packed.index <= len(self._packed):
            self._prefetch(self._packed[packed.index - 1])
        return out

    def _prefetch(self, packed: _Packed) -> None:
        """Start copying ``packed`` back on the side stream (backward uses it next)."""
        if packed.prefetched is not None or packed.host is None:
            return
        with torch.cuda.stream(self._side):
            if packed.ready is not None:
                self._side.wait_event(packed.ready)
            packed.prefetched = packed.host.to(packed.device, non_blocking=True)
            packed.ahead = torch.cuda.Event()
            packed.ahead.record(self._side)


def offloading(offload: ActivationOffload | None) -> contextlib.AbstractContextManager:
    """``offload.saving()``, or a no-op context when there is nothing to offload."""
    return offload.saving() if offload is not None else contextlib.nullcontext()


class HostOffloadOptimizer:
    """Runs ``optimizer``'s update in host memory; its state never occupies the device.

    Args:
        optimizer: a ``torch.optim`` optimizer without state yet. Its class, defaults and
            param groups are reused: the update is ``type(optimizer)`` over host copies of
            the parameters (built on first use, so ``--strategy ps``, which unwraps
            ``original``, never allocates them).

    ``param_groups``, ``state``, ``state_dict`` and ``load_state_dict`` are the host
    optimizer's, in the same format as the wrapped optimizer's (parameters by position).
    ``step()`` reads each parameter's ``.grad`` and writes its values in place, so gradient
    and parameter buckets (views) keep working.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        if optimizer.state:
            raise ValueError("--offload optimizer needs an optimizer that has not stepped yet")
        self.original = optimizer
        self.defaults = optimizer.defaults
        self._inner: torch.optim.Optimizer | None = None
        self._pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

    @property
    def inner(self) -> torch.optim.Optimizer:
        """The host optimizer (built on first use)."""
        if self._inner is None:
            groups = []
            for g in self.original.param_groups:
                hosts = []
                for p in g["params"]:
                    h = torch.empty(p.shape, dtype=p.dtype, pin_memory=p.is_cuda)
                    h.copy_(p.detach())
                    h.grad = torch.zeros_like(h)
                    self._pairs.append((p, h))
                    hosts.append(h)
                groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": hosts})
            self._inner = rebuild(self.original, groups)
        return self._inner

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    @property
    def state(self) -> Any:
        return self.inner.state

    @property
    def host_bytes(self) -> int:
        """Bytes of host memory held: parameter and gradient copies plus optimizer state."""
        inner = self.inner
        state = sum(
            t.numel() * t.element_size()
            for s in inner.state.values()
            for t in s.values()
            if isinstance(t, torch.Tensor)
        )
        return state + sum(2 * h.numel() * h.element_size() for _, h in self._pairs)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.original.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        """Parameters and gradients to host, the wrapped update there, parameters back."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        inner = self.inner
        stepped = []
        for p, h in self._pairs:
            if p.grad is None:
                h.grad = None
                continue
            if h.grad is None:
                h.grad = torch.zeros_like(h)
            h.copy_(p.detach(), non_blocking=True)
            h.grad.copy_(p.grad, non_blocking=True)
            stepped.append((p, h))
        if any(p.is_cuda for p, _ in stepped):
            torch.cuda.synchronize()
        inner.step()
        with torch.no_grad():
            for p, h in stepped:
                p.copy_(h, non_blocking=True)
        return loss

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


class Offloads:
    """What ``--offload`` builds for one model: the activation offload (or None) and the
    optimizer (wrapped in :class:`HostOffloadOptimizer` for ``optimizer``), and a report
    of what moved to host memory."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device | str,
        what: tuple[str, ...],
        optimizer: torch.optim.Optimizer,
    ) -> None:
        self.what = tuple(what)
        self.activations = ActivationOffload(model, device) if Offload.ACTIVATIONS in what else None
        self.optimizer: Any = (
            HostOffloadOptimizer(optimizer) if Offload.OPTIMIZER in what else optimizer
        )

    def report(self) -> dict[str, Any]:
        """``what``, the last step's activation bytes moved to host, the optimizer's host
        bytes (parameter and gradient copies plus state)."""
        act, opt = self.activations, self.optimizer
        return {
            "what": list(self.what),
            "activation_bytes_to_host_per_step": act.last_bytes if act is not None else 0,
            "optimizer_host_bytes": (
                opt.host_bytes if isinstance(opt, HostOffloadOptimizer) else 0
            ),
        }
