"""Per-layer times of a real step: a measured stand-in profile (``gossipgrad profile --layers``).

    gossipgrad profile -a resnet50 -b 64 --device cuda --precision bf16 --layers --out r50.json

Two passes over the same model and batch:

1. :func:`gossipgrad.tools.measure.profiler.profile_step`, untouched: the phase medians (forward,
   backward, optimizer) and each parameter's gradient-ready time, with no per-layer hooks
   in the way. These are the profile's ``forward_s``, ``backward_s``, ``optimizer_s`` and
   ``buckets``.
2. ``steps`` more steps with hooks on every leaf module: a forward pre-hook and hook mark
   each call's forward; in backward, hooks on the autograd node that produced the call's
   output mark when that node starts and ends (extended to the post-accumulate-grad hooks
   of the module's own parameters). Marks are CUDA events on a GPU (read after the step's
   synchronize), ``perf_counter`` on a CPU. Per leaf, the median over steps of the sum over
   its calls.

The layers' medians do not add up to the phases: what runs between leaves (ResNet's adds,
``torch.cat``, the loss), launch gaps and the hooks' own cost are nobody's. Each phase's
layer times are scaled so that they add up to pass 1's phase; ``layers_coverage`` records
the share the layers covered before scaling (near 1: the split is trustworthy).

``precision`` ``bf16``/``fp16`` runs forward and loss under ``torch.autocast`` (parameters
and gradients stay fp32, so the bytes are the same).
"""

# Over 300 lines on purpose: the per-layer measurement and its conversion to the profile
# format, which must agree.

from __future__ import annotations

import contextlib
import dataclasses
import platform
import statistics
from collections.abc import Iterator
from typing import Any

import torch

from gossipgrad.models import (
    loss_fn,
)
from gossipgrad.tools.devices.profile import FORMAT, LayerTime, StandinProfile
from gossipgrad.tools.devices.shapes import leaf_modules
from gossipgrad.tools.measure.profiler import (
    ArchRun,
    _Clock,
    profile_step,
)

AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def autocasting(model: torch.nn.Module, precision: str, device_type: str) -> Iterator[None]:
    """While active, every forward of ``model`` runs under ``torch.autocast`` at
    ``precision`` (``fp32``: no change). Hooks on the root module, removed on exit."""
    if precision == "fp32":
        yield
        return
    if precision not in AUTOCAST:
        raise ValueError(f"--precision {precision!r}: choose fp32, bf16 or fp16")
    ctx: list[Any] = []

    def enter(_m: torch.nn.Module, _args: Any) -> None:
        ctx.append(torch.autocast(device_type, dtype=AUTOCAST[precision]))
        ctx[-1].__enter__()

    def leave(_m: torch.nn.Module, _args: Any, _out: Any) -> None:
        ctx.pop().__exit__(None, None, None)

    hooks = [model.register_forward_pre_hook(enter), model.register_forward_hook(leave)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


class _LayerMarks:
    """Hooks on every leaf: per step, per leaf, (forward, backward) marks of each call."""

    def __init__(self, model: torch.nn.Module, clock: _Clock) -> None:
        self.clock = clock
        self.leaves = leaf_modules(model)
        self.fwd: dict[str, list[list[Any]]] = {}
        self.bwd: dict[str, list[list[Any]]] = {}
        self._hooks: list[Any] = []
        for name, m in self.leaves:
            self._hooks += [
                m.register_forward_pre_hook(self._pre(name)),
                m.register_forward_hook(self._post(name)),
            ]
            for p in m.parameters(recurse=False):
                if p.requires_grad:
                    self._hooks.append(p.register_post_accumulate_grad_hook(self._acc(name)))

    def clear(self) -> None:
        self.fwd = {n: [] for n, _ in self.leaves}
        self.bwd = {n: [] for n, _ in self.leaves}

    def _pre(self, name: str) -> Any:
        def hook(_m: torch.nn.Module, _args: Any) -> None:
            self.fwd[name].append([self.clock.mark(), None])

        return hook

    def _post(self, name: str) -> Any:
        def hook(_m: torch.nn.Module, _args: Any, out: Any) -> None:
            self.fwd[name][-1][1] = self.clock.mark()
            flat = torch.utils._pytree.tree_flatten(out)[0]
            node = next(
                (t.grad_fn for t in flat if isinstance(t, torch.Tensor) and t.grad_fn), None
            )
            if node is None:
                return
            call = [None, None]
            self.bwd[name].append(call)
            node.register_prehook(lambda *_: call.__setitem__(0, self.clock.mark()) or None)
            node.register_hook(lambda *_: call.__setitem__(1, self.clock.mark()) or None)

        return hook

    def _acc(self, name: str) -> Any:
        def hook(_p: torch.Tensor) -> None:
            calls = self.bwd.get(name)
            if calls:
                calls[-1].append(self.clock.mark())  # a later end than the node's own

        return hook

    def seconds(self) -> dict[str, tuple[float, float]]:
        """Per leaf: (forward, backward) seconds of this step, summed over its calls."""
        out = {}
        for name, _ in self.leaves:
            f = sum(self.clock.seconds(a, b) for a, b in self.fwd[name] if b is not None)
            b = 0.0
            for marks in self.bwd[name]:
                start, ends = marks[0], [e for e in marks[1:] if e is not None]
                if start is not None and ends:
                    b += max(self.clock.seconds(start, e) for e in ends)
            out[name] = (f, b)
        return out

    def calls(self) -> dict[str, int]:
        return {n: len(self.fwd[n]) for n, _ in self.leaves}

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def layer_seconds(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    steps: int,
    warmup: int,
) -> tuple[dict[str, tuple[float, float]], dict[str, int]]:
    """Per leaf, the median over ``steps`` steps of its (forward, backward) seconds, and
    its calls per forward. Trains ``model`` on ``(x, y)`` (in place)."""
    clock = _Clock(x.device)
    marks = _LayerMarks(model, clock)
    per_step: list[dict[str, tuple[float, float]]] = []
    model.train()
    try:
        for step in range(warmup + steps):
            marks.clear()
            optimizer.zero_grad(set_to_none=False)
            loss_fn(model(x), y).backward()
            optimizer.step()
            clock.sync()
            if step >= warmup:
                per_step.append(marks.seconds())
        calls = marks.calls()
    finally:
        marks.remove()
    medians = {
        name: (
            statistics.median(s[name][0] for s in per_step),
            statistics.median(s[name][1] for s in per_step),
        )
        for name in per_step[0]
    }
    return medians, calls


# Over 60 lines on purpose: one profiling pass (hooks installed, timed steps, hooks removed)
# reads as one sequence.
def profile_arch_layers(run: ArchRun, precision: str = "fp32", command: str = "") -> StandinProfile:
    """Build ``run``'s model and measure its stand-in profile on its random batch (module
    docstring; the whole step as :func:`gossipgrad.tools.measure.profiler.profile_arch` times
    it). ``precision``: ``fp32``, or ``bf16``/``fp16`` under ``torch.autocast``."""
    b = run.batch()
    model, x, y, steps, warmup = b.model, b.x, b.y, run.steps, run.warmup
    label = f"{run.arch}, input {'x'.join(map(str, b.shape))}"
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with autocasting(model, precision, x.device.type):
        step = profile_step(model, x, y, optimizer=opt, steps=steps, warmup=warmup, label=label)
        seconds, calls = layer_seconds(model, x, y, opt, steps, max(1, warmup // 2))
    p = step.profile
    covered = {
        "forward": sum(f for f, _ in seconds.values()),
        "backward": sum(b for _, b in seconds.values()),
    }
    fscale = p.forward_s / covered["forward"] if covered["forward"] else 0.0
    bscale = p.backward_s / covered["backward"] if covered["backward"] else 0.0
    kinds = dict((n, type(m).__name__) for n, m in leaf_modules(model))
    layers = tuple(
        LayerTime(n, kinds[n], calls[n], f * fscale, b * bscale) for n, (f, b) in seconds.items()
    )
    if not covered["forward"]:  # nothing measurable: all forward time on the first layer
        layers = (
            LayerTime(layers[0].name, layers[0].kind, max(1, layers[0].calls), p.forward_s, 0.0),
            *layers[1:],
        )
    source = {
        "kind": "measured",
        "command": command,
        "device": p.device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "steps": steps,
        "warmup": warmup,
        "layers_coverage": {
            k: round(v / getattr(p, f"{k}_s"), 4) if getattr(p, f"{k}_s") else None
            for k, v in covered.items()
        },
    }
    return StandinProfile.from_json(
        {
            "format": FORMAT,
            "arch": run.arch,
            "hidden": run.hidden,
            "input_shape": list(x.shape[1:]),
            "classes": b.classes,
            "precision": precision,
            "source": source,
            **step.to_json(),
            "layers": [
                dataclasses.asdict(lt) for lt in _exact_sums(layers, p.forward_s, p.backward_s)
            ],
        },
        name=label,
    )


def _exact_sums(
    layers: tuple[LayerTime, ...], forward_s: float, backward_s: float
) -> tuple[LayerTime, ...]:
    """``layers`` with the rounding of the scaling put on the largest layer of each phase,
    so the sums equal the phases (the profile format checks it)."""
    out = list(layers)
    for attr, want in (("forward_s", forward_s), ("backward_s", backward_s)):
        k = max(range(len(out)), key=lambda i: getattr(out[i], attr))
        rest = sum(getattr(lt, attr) for i, lt in enumerate(out) if i != k)
        lt = out[k]
        value = max(0.0, want - rest)
        out[k] = LayerTime(
            lt.name,
            lt.kind,
            max(1, lt.calls) if value else lt.calls,
            value if attr == "forward_s" else lt.forward_s,
            value if attr == "backward_s" else lt.backward_s,
        )
    return tuple(out)
