"""A stand-in accelerator: every leaf module takes its profiled time and computes nothing.

    import gossipgrad.tools.devices
    handle = gossipgrad.tools.devices.standin(model, "resnet50-p100-fp32-b64", dilate=10)
    opt = handle.optimizer(torch.optim.SGD(model.parameters(), lr=0.1))  # before wrapping
    opt = gossipgrad.DistributedOptimizer(opt, model, comm)
    ...                                       # train as usual; values carry no meaning
    handle.remove()                           # the model computes for real again

What stays real: the parameters, their gradients (real shapes, real bytes, in ``p.grad``,
which may be a view into a bucket), every hook and the order autograd fires them, the
engine's buckets and exchanges. What is stood in: each leaf module's ``forward`` is an
autograd ``Function`` that waits the profile's forward share of that module on the
:class:`~gossipgrad.tools.devices.clock.DeviceClock` (a ``time.sleep``: the CPU and the GIL are
free for the communication thread) and returns zeros of the right shape; its ``backward``
waits the backward share, then hands zero gradients (expanded, never materialised) to the
module's input and parameters, so each parameter's post-accumulate-grad hook fires when a
GPU would have had that gradient (a gradient already in a bucket gets an empty sparse
zero: accumulating it costs nothing, the bucket keeps its values). The optimizer
(:meth:`Standin.optimizer`) waits the profile's optimizer time and changes nothing.

Cheap arithmetic, exactly: activations are one sample's worth (the root module's input is
cut to one sample along dimension 0, its outputs are expanded back to the batch, so a loss
sees the full batch), and each leaf call's output is a zero buffer allocated once and
reused; what runs between leaves (ResNet's ``+=``, ``torch.cat``, ``F.relu``) runs for real
on those buffers. Per step the host does the engine's own work (zeroing buckets,
accumulating gradients into them, mixing) and the Python of the model, nothing more.

Times: a leaf called ``n`` times per forward waits ``1/n`` of its profiled time per call,
x ``dilate``, x batch / profile batch (linear, an approximation: a warning is logged when
the batch differs from the profile's).

Limits: dimension 0 must be the batch of the root's inputs and outputs; code between
leaves that depends on activation values or hard-codes the batch size may fail (the error
says so); two training forwards before one backward allocate fresh buffers (correct, not
cheap).
"""

# Over 300 lines on purpose: the patch, its autograd Function and the handle share state.

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from gossipgrad.engine.buckets import WAIT_OBSERVERS
from gossipgrad.tools.devices.clock import DeviceClock, VirtualClock, host_waited
from gossipgrad.tools.devices.dilation import Dilation
from gossipgrad.tools.devices.optimizer import standin_optimizer
from gossipgrad.tools.devices.profile import StandinProfile
from gossipgrad.tools.devices.shapes import Call, leaf_modules, trace_calls

log = logging.getLogger(__name__)

NOTE = (
    "stand-in device: the model's arithmetic is not computed; losses and accuracies carry "
    "no meaning and are not reported"
)


class _Leaf:
    """One patched leaf module: its profiled times, traced calls and output buffers."""

    __slots__ = ("name", "module", "calls", "fwd_s", "bwd_s", "params", "owner", "index")
    __slots__ += ("gen", "buffers", "pending", "forwards", "backwards")

    def __init__(self, name: str, module: torch.nn.Module, calls: list[Call], owner: Any) -> None:
        self.name, self.module, self.calls, self.owner = name, module, calls, owner
        lt = owner.profile.layer(name)
        self.fwd_s, self.bwd_s = lt.per_call()
        self.params = [p for p in module.parameters(recurse=False) if p.requires_grad]
        self.index = self.gen = 0
        self.buffers: list[list[torch.Tensor] | None] = [None] * len(calls)
        self.pending = [False] * len(calls)
        self.forwards = self.backwards = 0

    def outputs(self, i: int, device: torch.device, training: bool) -> list[Any]:
        """Call ``i``'s output leaves: the cached zero buffers, or fresh ones while the
        cached ones are still held by a graph that has not run backward."""
        call = self.calls[i]
        fresh = self.buffers[i] is None or (training and self.pending[i])
        if fresh:
            bufs = [
                torch.zeros(o[0], dtype=o[1], device=device) if _is_shape(o) else o
                for o in call.outputs
            ]
            if self.buffers[i] is None:
                self.buffers[i] = bufs
            return bufs
        return self.buffers[i]  # type: ignore[return-value]


def _is_shape(o: Any) -> bool:
    return isinstance(o, tuple) and len(o) == 2 and isinstance(o[1], torch.dtype)


_CPU = torch.device("cpu")
_ZEROS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _zero(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (dtype, device)
    if key not in _ZEROS:
        _ZEROS[key] = torch.zeros((), dtype=dtype, device=device)
    return _ZEROS[key]


_EMPTY: dict[tuple, torch.Tensor] = {}


def _param_grad(p: torch.Tensor) -> torch.Tensor:
    """A zero gradient for ``p`` that costs nothing to accumulate: where ``p.grad`` is
    already a dense tensor (a bucket view, after the first step), an empty sparse tensor,
    which ``p.grad += g`` adds in O(0) (a dense zero would read and write the whole
    gradient on the host: 40 ms for VGG-16's 411 MB first Linear); else an expanded zero,
    which autograd materialises once."""
    if p.grad is None or p.grad.layout is not torch.strided:
        return _zero(p.dtype, p.device).expand(p.shape)
    key = (tuple(p.shape), p.dtype, p.device)
    if key not in _EMPTY:
        _EMPTY[key] = torch.sparse_coo_tensor(
            torch.empty(len(p.shape), 0, dtype=torch.long, device=p.device),
            torch.empty(0, dtype=p.dtype, device=p.device),
            p.shape,
            check_invariants=False,
        )
    return _EMPTY[key]


class _StandinOp(torch.autograd.Function):
    """Forward: wait, return the buffers. Backward: wait, return zero gradients."""

    @staticmethod
    def forward(ctx: Any, leaf: _Leaf, i: int, outs: list, n_in: int, *tensors: torch.Tensor):  # noqa: ANN205
        owner = leaf.owner
        ctx.leaf, ctx.i, ctx.scale = leaf, i, owner.scale
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in tensors[:n_in]]
        owner.clock.run(leaf.fwd_s * owner.scale)
        leaf.forwards += 1
        result = [o for o in outs if isinstance(o, torch.Tensor)]
        for t in result:
            if not t.is_floating_point():
                ctx.mark_non_differentiable(t)
        return tuple(result) if len(result) != 1 else result[0]

    @staticmethod
    def backward(ctx: Any, *_grads: torch.Tensor):  # noqa: ANN205
        leaf = ctx.leaf
        leaf.owner.clock.run(leaf.bwd_s * ctx.scale)
        leaf.pending[ctx.i] = False
        leaf.backwards += 1
        need = ctx.needs_input_grad[4:]
        grads_in = [
            _zero(d, dev).expand(s) if need[k] else None for k, (s, d, dev) in enumerate(ctx.inputs)
        ]
        grads_p = [_param_grad(p) for p in leaf.params]
        return (None, None, None, None, *grads_in, *grads_p)


def _leaf_forward(leaf: _Leaf, *args: Any, **kwargs: Any) -> Any:
    owner = leaf.owner
    if leaf.gen != owner.gen:  # a new forward of the root: calls count from 0 again
        leaf.gen, leaf.index = owner.gen, 0
    i = leaf.index
    if i >= len(leaf.calls):
        raise RuntimeError(
            f"stand-in: module {leaf.name!r} was called {i + 1} times in one forward, "
            f"{len(leaf.calls)} when its shapes were traced; a forward that changes with "
            "the input cannot be stood in"
        )
    leaf.index += 1
    if len(args) == 1 and not kwargs and isinstance(args[0], torch.Tensor):
        inputs = [args[0]]
    else:
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    device = leaf.params[0].device if leaf.params else inputs[0].device if inputs else _CPU
    training = torch.is_grad_enabled() and (
        bool(leaf.params) or any(t.requires_grad for t in inputs)
    )
    outs = leaf.outputs(i, device, training)
    result = _StandinOp.apply(leaf, i, outs, len(inputs), *inputs, *leaf.params)
    if training:
        leaf.pending[i] = True
    produced = iter(result if isinstance(result, tuple) else (result,))
    flat = [next(produced) if isinstance(o, torch.Tensor) else o for o in outs]
    return tree_unflatten(flat, leaf.calls[i].spec)


class Standin:
    """``model`` patched in place to run on a stand-in of ``profile``'s device.

    Args:
        model: the profiled model (same leaf modules, same parameter bytes), on CPU
            (or the meta device, to compute a profile's gradient-ready times).
        profile: a :class:`StandinProfile`, a shipped profile's name or a file path.
        dilate: compute times x this (see :mod:`gossipgrad.tools.devices.dilation`).
        clock: the device; default a fresh :class:`DeviceClock` (one per model: on the
            thread world each rank's model is its own device).
        sample_shape: one input sample's shape; default the profile's ``input_shape``.

    Raises ``ValueError`` (naming the profile) when the profile does not fit the model.
    Use as a context manager, or call :meth:`remove` to restore the real forwards.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        profile: StandinProfile | str | Path,
        dilate: float = 1.0,
        *,
        clock: DeviceClock | VirtualClock | None = None,
        sample_shape: tuple[int, ...] | None = None,
    ) -> None:
        self.profile = profile if isinstance(profile, StandinProfile) else load(profile)
        self.dilation = Dilation(dilate)
        self.model = model
        self.clock = clock if clock is not None else DeviceClock()
        if host_waited not in WAIT_OBSERVERS:  # the engine's forward waits reach the clock
            WAIT_OBSERVERS.append(host_waited)
        self.gen = 0
        self.scale = self.dilation.factor
        self.batch = self.profile.batch_size
        self._warned_batch = False
        check_fits(self.profile, model)
        calls = trace_calls(model, tuple(sample_shape or self.profile.input_shape))
        self.leaves: dict[str, _Leaf] = {}
        for name, m in leaf_modules(model):
            leaf = _Leaf(name, m, calls.get(name, []), self)
            self.leaves[name] = leaf
            m.forward = lambda *a, _leaf=leaf, **k: _leaf_forward(_leaf, *a, **k)
        self._hooks = [
            model.register_forward_pre_hook(self._narrow, with_kwargs=True, prepend=True),
            model.register_forward_hook(self._expand, prepend=True),
        ]

    # -- the root's hooks: one sample in, the batch out -------------------------------------

    def _narrow(self, _m: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        self.gen += 1
        self.clock.sync()  # a new step: host work is not carried over from the last one
        flat, spec = tree_flatten((args, kwargs))
        first = next((t for t in flat if isinstance(t, torch.Tensor) and t.dim()), None)
        batch = int(first.shape[0]) if first is not None else 1
        self.batch = batch
        self.scale = self.dilation.factor * batch / self.profile.batch_size
        if batch != self.profile.batch_size and torch.is_grad_enabled() and not self._warned_batch:
            self._warned_batch = True
            log.warning(
                "stand-in: batch %d, profile %s was taken at batch %d: compute times scaled "
                "by %d/%d (linear, an approximation)",
                batch,
                self.profile.name,
                self.profile.batch_size,
                batch,
                self.profile.batch_size,
            )
        if batch == 1:
            return args, kwargs
        cut = [
            t[:1] if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == batch else t
            for t in flat
        ]
        return tree_unflatten(cut, spec)

    def _expand(self, _m: torch.nn.Module, _args: tuple, out: Any) -> Any:
        if self.batch == 1:
            return out
        flat, spec = tree_flatten(out)
        b = self.batch
        grown = [
            t.expand(b, *t.shape[1:])
            if isinstance(t, torch.Tensor) and t.dim() and t.shape[0] == 1
            else t
            for t in flat
        ]
        return tree_unflatten(grown, spec)

    # -- the rest of the device -------------------------------------------------------------

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """An optimizer over ``optimizer``'s param groups (same hyperparameters, no state)
        whose ``step`` waits the profile's optimizer time and changes nothing. Pass it to
        the distributed optimizer instead of ``optimizer``."""
        return standin_optimizer(self.clock, self.profile, self.dilation.factor, optimizer)

    def remove(self) -> None:
        """Restore every leaf's own ``forward`` and remove the root's hooks."""
        for leaf in self.leaves.values():
            leaf.module.__dict__.pop("forward", None)
            leaf.buffers = [None] * len(leaf.calls)
        for h in self._hooks:
            h.remove()
        self._hooks = []

    def __enter__(self) -> Standin:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.remove()

    def step_s(self) -> float:
        """The device time of one training step at the last forward's batch, dilated."""
        p, k = self.profile.planner, self.dilation.factor
        return (p.forward_s + p.backward_s) * self.scale + p.optimizer_s * k

    def report(self) -> dict[str, Any]:
        """What a summary says about the device (the profile, its source, the dilation)."""
        p = self.profile
        return {
            **describe(p, self.dilation.factor),
            "batch_scale": self.batch / p.batch_size,
            "profile_step_s": p.compute_s,
            "profile_step_s_dilated": self.step_s(),
            "device_busy_s": self.clock.busy_s,
        }


def describe(p: StandinProfile, dilate: float) -> dict[str, Any]:
    """What a record says about a stand-in run's profile, its source and the dilation."""
    return {
        "note": NOTE,
        "profile": p.name,
        "arch": p.arch,
        "profile_device": p.device,
        "profile_batch": p.batch_size,
        "precision": p.precision,
        "source": dict(p.source),
        "dilate": dilate,
        "profile_step_s": p.compute_s,
    }


def load(spec: str | Path) -> StandinProfile:
    return StandinProfile.load(spec)


def check_fits(profile: StandinProfile, model: torch.nn.Module) -> None:
    """Raise ``ValueError`` unless ``profile`` lists exactly ``model``'s leaf modules and
    its parameter bytes."""
    leaves = leaf_modules(model)
    names = [n for n, _ in leaves]
    have = {lt.name: lt.kind for lt in profile.layers}
    missing = [n for n in names if n not in have]
    extra = sorted(set(have) - set(names))
    where = f"stand-in profile {profile.name} (of {profile.arch})"
    other = [
        f"{n} is {type(m).__name__}, not {have[n]}"
        for n, m in leaves
        if have.get(n, type(m).__name__) not in ("", type(m).__name__)
    ]
    if other:
        raise ValueError(f"{where} does not fit {type(model).__name__}: {_few(other)}")
    if missing or extra:
        raise ValueError(
            f"{where} does not fit {type(model).__name__}: "
            + "; ".join(
                s
                for s in (
                    f"no layer for {_few(missing)}" if missing else "",
                    f"layers not in the model: {_few(extra)}" if extra else "",
                )
                if s
            )
        )
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if nbytes != profile.planner.param_bytes:
        raise ValueError(
            f"{where}: field 'param_bytes' is {profile.planner.param_bytes}, the model has "
            f"{nbytes} bytes of parameters (another width or class count?)"
        )


def _few(names: Iterable[str], n: int = 3) -> str:
    names = list(names)
    head = ", ".join(repr(x) for x in names[:n])
    return head + (f" and {len(names) - n} more" if len(names) > n else "")


def standin(
    model: torch.nn.Module, profile: StandinProfile | str | Path, dilate: float = 1.0, **kw: Any
) -> Standin:
    """Patch ``model`` in place to run on a stand-in device (see :class:`Standin`); returns
    the handle whose ``remove()`` undoes it."""
    return Standin(model, profile, dilate, **kw)
