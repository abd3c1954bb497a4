"""Profile one rank's training step without communication: the planner's compute input.

    gossipgrad profile -a resnet50 -b 64 --out profile.json

Each step is timed in three phases (forward = model + loss, backward, optimizer); a
``register_post_accumulate_grad_hook`` on every trainable parameter records when its
gradient is ready, measured from the start of backward — the moment the engine's overlap
hook would hand its bucket to the communication thread. After ``warmup`` untimed steps the
median over ``steps`` steps is kept, per phase and per parameter. The result is one bucket
per parameter, in the order backward produced them, so the planner can merge them into any
bucket size (it never splits).

Medians stay consistent: a parameter's ready time is <= that step's backward time in every
step, so its median is <= the median backward time. A parameter that gets no gradient (not
used in the loss) is listed last, ready at the end of backward, as the engine submits it
then. On CUDA the phases are timed with CUDA events and ``memory_bytes`` is the peak
allocated memory; on CPU ``memory_bytes`` is omitted.

    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    >>> x, y = torch.randn(16, 4), torch.randint(0, 2, (16,))
    >>> result = profile_step(model, x, y, steps=3, warmup=1)
    >>> [p.name.split(".")[0] for p in result.params]  # the last layer's gradients come first
    ['2', '2', '0', '0']
    >>> result.profile.grad_bytes == result.profile.param_bytes == 4 * (4 * 8 + 8 + 8 * 2 + 2)
    True
    >>> [(lin.bucket, lin.out_features, lin.in_features, lin.rows) for lin in result.profile.linear]
    [(0, 8, 4, 16), (2, 2, 8, 16)]
"""

# Over 300 lines on purpose: the profile's measurement and its conversion to the planner's format,
# which must agree.

from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.offload import ActivationOffload, Offloads, offloading
from gossipgrad.models import (
    MODELS,
    SEQUENCE_MODELS,
    SMALL_MODELS,
    build_model,
    default_classes,
    input_shape,
    loss_fn,
)
from gossipgrad.tools.plan.formats import Bucket, LinearLayer, Profile

DEFAULT_STEPS = 20
DEFAULT_WARMUP = 5


@dataclass(frozen=True)
class ParamTiming:
    """One trainable parameter: its index in ``model.parameters()``, name, gradient bytes
    and median ready time from the start of backward."""

    index: int
    name: str
    bytes: int
    ready_s: float


@dataclass(frozen=True)
class StepProfile:
    """A measured step: the planner's :class:`Profile` plus what a reader needs to trust it.

    ``params`` are in backward order, the same order and bytes as ``profile.buckets``;
    ``spread`` holds each phase's (min, max) over the timed steps; ``layout_order`` is True
    when backward order equals reverse registration order (how the engine's
    ``BucketLayout`` groups parameters).
    """

    profile: Profile
    params: tuple[ParamTiming, ...]
    spread: dict[str, tuple[float, float]]
    steps: int
    warmup: int
    layout_order: bool
    offload: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The Profile document; each bucket also names its parameter (the planner ignores
        unknown keys), plus ``steps``, ``warmup``, ``spread_s`` and ``layout_order``."""
        out = self.profile.to_json()
        for bucket, p in zip(out["buckets"], self.params, strict=True):
            bucket["name"] = p.name
        out.update(
            steps=self.steps,
            warmup=self.warmup,
            layout_order=self.layout_order,
            spread_s={k: list(v) for k, v in self.spread.items()},
        )
        if self.offload is not None:
            out["offload"] = self.offload
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")


class _Clock:
    """Wall-clock marks on CPU; CUDA events (read after a synchronize) on a GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        if not self.cuda:
            return end - start
        return start.elapsed_time(end) / 1000.0

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def profile_step(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    loss: Callable[[Any, torch.Tensor], torch.Tensor] = loss_fn,
    steps: int = DEFAULT_STEPS,
    warmup: int = DEFAULT_WARMUP,
    label: str | None = None,
    device_name: str | None = None,
    offload: ActivationOffload | None = None,
) -> StepProfile:
    """Time ``steps`` local training steps of ``model`` on the batch ``(x, y)``.

    ``model``, ``x`` and ``y`` must already be on one device. ``optimizer`` defaults to SGD
    (lr 0.01, momentum 0.9), the shape of ``gossipgrad train``'s. Modifies ``model`` in place
    (it trains on the batch); hooks are removed before returning. ``offload`` moves the
    tensors saved for backward to host memory (``--offload activations``).
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    named = [(i, n, p) for i, (n, p) in enumerate(model.named_parameters()) if p.requires_grad]
    if not named:
        raise ValueError("the model has no trainable parameters")
    opt = optimizer or torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    phases, ready, order_hits = _timed_steps(model, x, y, opt, loss, named, steps, warmup, offload)
    med = {k: statistics.median(v) for k, v in phases.items()}
    timings = sorted(
        (
            ParamTiming(
                i,
                n,
                p.numel() * p.element_size(),
                min(statistics.median(ready[i]), med["backward_s"]),
            )
            for i, n, p in named
        ),
        key=lambda pt: (pt.ready_s, -pt.index),
    )
    memory = torch.cuda.max_memory_allocated(x.device) if x.device.type == "cuda" else None
    linear = linear_layers(model, x)
    profile = Profile(
        model=label or type(model).__name__,
        batch_size=int(x.shape[0]),
        device=device_name or describe_device(x.device),
        forward_s=med["forward_s"],
        backward_s=med["backward_s"],
        optimizer_s=med["optimizer_s"],
        param_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        buckets=tuple(Bucket(t.index, t.bytes, t.ready_s) for t in timings),
        memory_bytes=memory,
        linear=linear,
        per_parameter=True,
    )
    spread = {k: (min(v), max(v)) for k, v in phases.items()}
    return StepProfile(profile, tuple(timings), spread, steps, warmup, order_hits == steps)


def linear_layers(model: torch.nn.Module, x: torch.Tensor) -> tuple[LinearLayer, ...]:
    """Every exact ``nn.Linear`` whose weight trains, with the rows of input it sees in one
    forward of ``x`` (batch x positions): the planner's sufficient-factor input. One
    untimed forward without gradients; a layer never run has 0 rows."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    rows: dict[int, int] = {}
    mods = [m for m in model.modules() if type(m) is torch.nn.Linear and m.weight.requires_grad]

    def count(m: torch.nn.Module) -> Callable[..., None]:
        def hook(_m: torch.nn.Module, args: tuple, _out: Any) -> None:
            rows[id(m)] = rows.get(id(m), 0) + args[0].numel() // m.in_features

        return hook

    handles = [m.register_forward_hook(count(m)) for m in mods]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return tuple(
        LinearLayer(index[id(m.weight)], m.out_features, m.in_features, rows.get(id(m), 0))
        for m in mods
    )


def _timed_steps(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    opt: torch.optim.Optimizer,
    loss: Callable[[Any, torch.Tensor], torch.Tensor],
    named: list[tuple[int, str, torch.Tensor]],
    steps: int,
    warmup: int,
    offload: ActivationOffload | None,
) -> tuple[dict[str, list[float]], dict[int, list[float]], int]:
    """Run ``warmup + steps`` steps; per timed step the phase times, each parameter's
    gradient-ready time from the start of backward, and whether gradients became ready in
    reverse registration order (the count of such steps)."""
    clock = _Clock(x.device)
    marks: dict[int, Any] = {}  # parameter index -> clock mark, in firing order

    def hook(i: int) -> Callable[[torch.Tensor], None]:
        return lambda _p: marks.__setitem__(i, clock.mark())

    hooks = [p.register_post_accumulate_grad_hook(hook(i)) for i, _, p in named]
    phases: dict[str, list[float]] = {"forward_s": [], "backward_s": [], "optimizer_s": []}
    ready: dict[int, list[float]] = {i: [] for i, _, _ in named}
    order_hits = 0
    model.train()
    try:
        if x.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(x.device)
        for step in range(warmup + steps):
            opt.zero_grad(set_to_none=False)
            marks.clear()
            clock.sync()
            t = [clock.mark()]
            with offloading(offload):
                out_loss = loss(model(x), y)
                t.append(clock.mark())
                out_loss.backward()
                t.append(clock.mark())
            opt.step()
            t.append(clock.mark())
            clock.sync()
            if step < warmup:
                continue
            for key, a, b in zip(phases, t[:-1], t[1:], strict=True):
                phases[key].append(clock.seconds(a, b))
            backward = phases["backward_s"][-1]
            for i in ready:  # no hook: no gradient this step, submitted at the end
                ready[i].append(clock.seconds(t[1], marks[i]) if i in marks else backward)
            order_hits += list(marks) == sorted(marks, reverse=True)
    finally:
        for h in hooks:
            h.remove()
    return phases, ready, order_hits


def layout_profile(result: StepProfile, model: torch.nn.Module, cap_bytes: int) -> Profile:
    """The profile regrouped into the buckets the engine would use at ``cap_bytes``.

    ``BucketLayout`` groups parameters in reverse registration order, which need not be
    backward order; :func:`gossipgrad.tools.plan.model.rebucket` merges in measured backward order.
    This mirrors the engine: each layout bucket is ready when its last parameter is, and
    buckets are listed by ready time, the order in which the overlap hooks hand them to the
    communication thread. ``model`` is the profiled module or one built the same way (e.g.
    ``build_model`` with the same arguments after :func:`profile_arch`): its parameters must
    have the profiled names and sizes, else ``ValueError``. The regrouped profile lists no
    Linear layers (they name per-parameter buckets): plan sufficient factors from the
    per-parameter profile.
    """
    named = list(model.named_parameters())
    for t in result.params:
        name, p = named[t.index] if t.index < len(named) else ("<none>", None)
        if name != t.name or p is None or p.numel() * p.element_size() != t.bytes:
            raise ValueError(
                f"model does not match the profile: parameter {t.index} is {name!r}, "
                f"the profile has {t.name!r} ({t.bytes} bytes)"
            )
    layout = BucketLayout([p for _, p in named], cap_bytes)
    position = {id(p): i for i, (_, p) in enumerate(named)}
    ready = {t.index: t.ready_s for t in result.params}
    buckets = [
        Bucket(b.index, b.nbytes, max(ready[position[id(p)]] for p in b.params))
        for b in layout.buckets
    ]
    merged = result.profile.with_buckets(sorted(buckets, key=lambda b: (b.ready_s, b.index)))
    # its bucket indices were the parameters' and are the layout's buckets' now
    return dataclasses.replace(merged, linear=(), per_parameter=False)


class RandomBatch(NamedTuple):
    """A model built from the registry and one random batch for it, on ``device``."""

    model: torch.nn.Module
    x: torch.Tensor
    y: torch.Tensor
    shape: tuple[int, ...]
    classes: int
    device: torch.device


@dataclass(frozen=True)
class ArchRun:
    """What the profile commands measure: ``arch`` from the model registry on one random
    batch drawn from ``seed``, timed over ``steps`` after ``warmup``. ``classes`` 0 means
    the model's default (10 for mlp/cnn, the digits; 1000 for torchvision's, ImageNet);
    ``device`` is ``cpu``, ``cuda`` or ``cuda:N``."""

    arch: str
    batch_size: int
    hidden: int = 0
    image_size: int = 224
    classes: int = 0
    device: str = "cpu"
    steps: int = DEFAULT_STEPS
    warmup: int = DEFAULT_WARMUP
    seed: int = 0

    def batch(self) -> RandomBatch:
        """Check the arguments (errors name the flag), build the model and draw the batch."""
        if self.arch not in MODELS:
            raise ValueError(
                f"unknown model {self.arch!r} (--arch); choose one of: {', '.join(MODELS)}"
            )
        for flag, value, low in (
            ("--batch-size", self.batch_size, 1),
            ("--image-size", self.image_size, 16),
            ("--classes", self.classes, 0),
        ):
            if value < low:
                raise ValueError(f"{flag} must be >= {low}, got {value}")
        dev = torch.device(self.device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(
                f"--device {self.device}: CUDA is not available here; use --device cpu"
            )
        classes = self.classes or default_classes(self.arch)
        shape = input_shape(self.arch, self.image_size)
        torch.manual_seed(self.seed)
        model = build_model(self.arch, shape, classes, self.hidden).to(dev)
        g = torch.Generator().manual_seed(self.seed)
        if self.arch in SEQUENCE_MODELS:  # token ids in, and one target per position
            x = torch.randint(0, classes, (self.batch_size, *shape), generator=g).to(dev)
            y = torch.randint(0, classes, (self.batch_size, *shape), generator=g).to(dev)
        else:
            x = torch.randn(self.batch_size, *shape, generator=g).to(dev)
            y = torch.randint(0, classes, (self.batch_size,), generator=g).to(dev)
        return RandomBatch(model, x, y, tuple(shape), classes, dev)

    def label(self, shape: tuple[int, ...]) -> str:
        hidden = f" (hidden {self.hidden})" if self.hidden and self.arch in SMALL_MODELS else ""
        return f"{self.arch}{hidden}, input {'x'.join(map(str, shape))}"


def profile_arch(run: ArchRun, offload: tuple[str, ...] = ()) -> StepProfile:
    """Profile ``run``'s model on its random batch. ``offload`` (names of
    :class:`gossipgrad.options.Offload`) profiles the step with them; the result's
    ``offload`` says what moved to host memory."""
    b = run.batch()
    opt = torch.optim.SGD(b.model.parameters(), lr=0.01, momentum=0.9)
    plan = Offloads(b.model, b.device, offload, opt)
    result = profile_step(
        b.model,
        b.x,
        b.y,
        optimizer=plan.optimizer,
        steps=run.steps,
        warmup=run.warmup,
        label=run.label(b.shape),
        offload=plan.activations,
    )
    return dataclasses.replace(result, offload=plan.report()) if offload else result


def describe_device(device: torch.device) -> str:
    """``NVIDIA H100 80GB HBM3`` on a GPU; ``cpu: <model> (N threads)`` on a CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            name = next(
                (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), name
            )
    except OSError:
        pass
    return f"cpu: {name} ({torch.get_num_threads()} threads)"
