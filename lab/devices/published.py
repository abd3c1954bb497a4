"""Stand-in profiles from published figures: per-layer costs scaled to a measured images/s.

    profile = published_profile("resnet50", PUBLISHED["resnet50-p100-fp32-b64"])

How a layer's time is made (``scripts/standin_profiles.py`` writes the shipped files):

1. Count, on the meta device at the published batch, each leaf module's floating-point
   operations and bytes moved per call: convolutions and Linear layers 2 x multiply-adds
   (+ bias), normalisations 5, pooling kernel-size, activations and dropout 1 operation per
   element; bytes = inputs + outputs + parameters read, at the precision's element size.
   Backward: the weight gradient costs the forward's operations again, the input gradient
   (skipped where the input needs none, as for the first layer) once more; bytes about
   twice the forward's.
2. Each phase of each layer takes ``max(ops / peak_flops, bytes / bandwidth)`` on the GPU's
   datasheet peaks (a roofline), the optimizer (SGD with momentum) 5 x the parameter bytes
   / bandwidth.
3. One factor scales all of them so that forward + backward + optimizer equals
   ``batch / images_per_s`` of the published measurement: ``roofline_fraction`` in the
   profile's ``source`` is 1 / that factor, the share of peak the measurement reached.
4. The gradient-ready times (``buckets``) follow by running the stand-in on a
   :class:`~gossipgrad.tools.devices.clock.VirtualClock`: the order autograd runs the layers'
   backward and the sums of their times, with no waiting.

The per-layer split is a model; the total step is the publication's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from gossipgrad.models import build_model, default_classes, input_shape, loss_fn
from gossipgrad.tools.devices.clock import VirtualClock
from gossipgrad.tools.devices.profile import LayerTime, StandinProfile
from gossipgrad.tools.devices.standin import Standin
from gossipgrad.tools.plan.formats import Bucket, Profile
from lab.devices.costs import Gpu, layer_costs


@dataclass(frozen=True)
class Published:
    """One published training throughput: model, batch, GPU, images/s, and the citation."""

    arch: str
    batch_size: int
    images_per_s: float
    gpu: Gpu
    reference: str
    url: str
    precision: str = "fp32"
    notes: str = ""
    hidden: int = 0  # width of mlp/cnn (0: their default)


P100_SXM2 = Gpu("NVIDIA Tesla P100-SXM2 (DGX-1)", 10.6e12, 732e9)
P100_PCIE = Gpu("NVIDIA Tesla P100-PCIe", 9.3e12, 732e9)
NOMINAL = Gpu("a nominal GPU (10 TFLOPS, 1 TB/s)", 10e12, 1e12)
_TF = (
    "TensorFlow benchmarks (tf_cnn_benchmarks), NVIDIA DGX-1, 1 of 8 Tesla P100, "
    "synthetic data, SGD, May 2017"
)
_TF_URL = "https://www.tensorflow.org/performance/benchmarks (Details for NVIDIA DGX-1)"
_DELL = (
    "Dell EMC HPC Innovation Lab, 'Deep Learning Performance with P100 GPUs' (R. Xu, "
    "N. Dandapanthu, Oct 2016): NV-Caffe GoogLeNet, ILSVRC12, 1 P100-PCIe, batch 128"
)
_DELL_URL = (
    "http://en.community.dell.com/techcenter/high-performance-computing/b/general_hpc/"
    "archive/2016/11/11/deep-learning-performance-with-p100-gpus"
)

PUBLISHED: dict[str, Published] = {
    "resnet50-p100-fp32-b64": Published("resnet50", 64, 219.0, P100_SXM2, _TF, _TF_URL),
    "resnet50-p100-fp32-b32": Published("resnet50", 32, 195.0, P100_SXM2, _TF, _TF_URL),
    "vgg16-p100-fp32-b64": Published("vgg16", 64, 154.0, P100_SXM2, _TF, _TF_URL),
    "vgg16-p100-fp32-b32": Published("vgg16", 32, 144.0, P100_SXM2, _TF, _TF_URL),
    "googlenet-p100pcie-fp32-b128": Published(
        "googlenet",
        128,
        468.0,
        P100_PCIE,
        _DELL,
        _DELL_URL,
        notes="NV-Caffe's GoogLeNet (LRN, no batch norm) stood in for by torchvision's "
        "(batch norm after every convolution), auxiliary heads in both",
    ),
}
"""The shipped profiles' sources, by profile name."""


def published_profile(name: str, pub: Published, image_size: int = 224) -> StandinProfile:
    """The stand-in profile of ``pub`` (see the module docstring), named ``name``."""
    shape = input_shape(pub.arch, image_size)
    classes = default_classes(pub.arch)
    with torch.device("meta"):
        model = build_model(pub.arch, shape, classes, pub.hidden)
    costs = layer_costs(model, shape, pub.batch_size, pub.precision)
    roof = [c.seconds(pub.gpu) for c in costs]
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt_roof = 5.0 * param_bytes / pub.gpu.bandwidth
    step_s = pub.batch_size / pub.images_per_s
    scale = step_s / (sum(f + b for f, b in roof) + opt_roof)
    layers = tuple(
        LayerTime(c.name, c.kind, c.calls, f * scale, b * scale)
        for c, (f, b) in zip(costs, roof, strict=True)
    )
    macs = sum(c.macs for c in costs) / pub.batch_size
    source = {
        "kind": "published",
        "reference": pub.reference,
        "url": pub.url,
        "images_per_s": pub.images_per_s,
        "batch_size": pub.batch_size,
        "gpu_peak_flops": pub.gpu.peak_flops,
        "gpu_bandwidth_bytes_per_s": pub.gpu.bandwidth,
        "roofline_fraction": round(1.0 / scale, 4),
        "gmacs_per_image": round(macs / 1e9, 4),
        "method": "per-layer roofline of torchvision's model (lab.devices.published) "
        "scaled to batch / images_per_s",
    }
    if pub.notes:
        source["notes"] = pub.notes
    label = f"{pub.arch}, input {'x'.join(map(str, shape))}"
    draft = _profile(name, pub, shape, classes, label, layers, param_bytes, opt_roof * scale)
    return _with_ready_times(draft, model, source)


def _profile(
    name: str,
    pub: Published,
    shape: tuple[int, ...],
    classes: int,
    label: str,
    layers: tuple[LayerTime, ...],
    param_bytes: int,
    optimizer_s: float,
    buckets: tuple[Bucket, ...] | None = None,
    names: tuple[str, ...] = (),
    source: dict[str, Any] | None = None,
) -> StandinProfile:
    fwd = sum(lt.forward_s for lt in layers)
    bwd = sum(lt.backward_s for lt in layers)
    planner = Profile(
        model=label,
        batch_size=pub.batch_size,
        device=pub.gpu.name,
        forward_s=fwd,
        backward_s=bwd,
        optimizer_s=optimizer_s,
        param_bytes=param_bytes,
        buckets=buckets or (Bucket(0, param_bytes, bwd),),
    )
    return StandinProfile(
        name=name,
        arch=pub.arch,
        hidden=pub.hidden,
        input_shape=shape,
        classes=classes,
        precision=pub.precision,
        source=source or {"kind": "published"},
        planner=planner,
        layers=layers,
        bucket_names=names,
    )


def _with_ready_times(
    draft: StandinProfile, model: torch.nn.Module, source: dict[str, Any]
) -> StandinProfile:
    """``draft`` with one bucket per parameter, ready when the stand-in produces it."""
    buckets, names = ready_times(model, draft)
    end = draft.planner.backward_s  # the same sum in another order: clamp the rounding
    buckets = tuple(Bucket(b.index, b.bytes, min(b.ready_s, end)) for b in buckets)
    return StandinProfile(
        name=draft.name,
        arch=draft.arch,
        hidden=draft.hidden,
        input_shape=draft.input_shape,
        classes=draft.classes,
        precision=draft.precision,
        source=source,
        planner=replace(draft.planner.with_buckets(buckets), per_parameter=True),
        layers=draft.layers,
        bucket_names=names,
    )


def ready_times(
    model: torch.nn.Module, profile: StandinProfile
) -> tuple[tuple[Bucket, ...], tuple[str, ...]]:
    """Each parameter's gradient-ready time on the stand-in of ``profile`` (undilated, from
    the start of backward), in the order they become ready: one training step of ``model``
    (on the meta device, or any) on a :class:`VirtualClock`. Parameters without a gradient
    come last, ready at the end of backward."""
    clock = VirtualClock()
    named = [(i, n, p) for i, (n, p) in enumerate(model.named_parameters()) if p.requires_grad]
    marks: dict[int, float] = {}

    def mark(i: int) -> Any:
        def hook(_p: torch.Tensor) -> None:
            marks.setdefault(i, clock.now())

        return hook

    hooks = [p.register_post_accumulate_grad_hook(mark(i)) for i, _, p in named]
    device = next(model.parameters()).device
    handle = Standin(model, profile, clock=clock)
    try:
        model.train()
        x = torch.zeros(profile.batch_size, *profile.input_shape, device=device)
        y = torch.zeros(profile.batch_size, dtype=torch.long, device=device)
        loss = loss_fn(model(x), y)
        start = clock.now()
        loss.backward()
        end = clock.now() - start
    finally:
        handle.remove()
        for h in hooks:
            h.remove()
    rows = sorted(
        ((min(marks.get(i, start + end) - start, end), -i, i, n, p) for i, n, p in named),
    )
    buckets = tuple(Bucket(i, p.numel() * p.element_size(), max(0.0, t)) for t, _, i, n, p in rows)
    return buckets, tuple(n for _, _, _, n, _ in rows)


def nominal_profile(
    arch: str, batch_size: int, step_s: float, hidden: int = 0, image_size: int = 224
) -> StandinProfile:
    """A profile of ``arch`` whose step takes ``step_s`` on a nominal GPU: the layers split
    as :func:`published_profile` splits them, the total chosen, not measured (for tests and
    what-if runs; its ``source`` says so)."""
    if step_s <= 0 or batch_size < 1:
        raise ValueError(f"need step_s > 0 and batch_size >= 1, got {step_s}, {batch_size}")
    pub = Published(
        arch,
        batch_size,
        batch_size / step_s,
        NOMINAL,
        f"nominal: a {step_s:g} s step chosen for {arch}, not a measurement",
        "",
        hidden=hidden,
    )
    return published_profile(f"{arch}-nominal-{step_s:g}s", pub, image_size)
