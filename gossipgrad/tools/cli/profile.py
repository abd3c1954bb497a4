"""``gossipgrad profile``: one rank's step, no communication -> the planner's profile JSON.

    gossipgrad profile -a resnet50 -b 64 --out profile.json
    gossipgrad profile -a mlp --hidden 1024 --threads 1
    gossipgrad profile -a resnet18 -b 32 --offload activations   # with and without
    gossipgrad profile -a resnet50 -b 64 --device cuda --precision bf16 --layers --out r50.json

With ``--offload`` the step is profiled twice, without and then with it; the profile written
is the one with it, plus ``offload``: what moved to host memory and the peak device memory
and step time of both (peak memory is ``null`` on a CPU, which has no device memory).

With ``--layers`` every leaf module is timed too and the JSON is a stand-in profile
(``--device standin:r50.json``; :mod:`gossipgrad.tools.measure.layers`), still a planner profile.

Parses and validates, then calls :func:`gossipgrad.tools.measure.profiler.profile_arch` (or
:func:`gossipgrad.tools.measure.layers.profile_arch_layers`).
"""

from __future__ import annotations

import json

import click
import torch

from gossipgrad.cli.output import write_output
from gossipgrad.models import MODELS
from gossipgrad.tools.cli.output import output_file
from gossipgrad.tools.measure.profiler import ArchRun, profile_arch


@click.command()
@click.option(
    "-a", "--arch", type=click.Choice(list(MODELS)), default="mlp", show_default=True, help="Model."
)
@click.option(
    "-b",
    "--batch-size",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Samples per rank per step.",
)
@click.option(
    "--hidden",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Width of mlp/cnn (0 = default).",
)
@click.option(
    "--image-size",
    type=click.IntRange(min=16),
    default=224,
    show_default=True,
    help="Input side for torchvision models (mlp/cnn take digits' 1x8x8).",
)
@click.option(
    "--classes",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Output classes (0 = 10 for mlp/cnn, 1000 otherwise).",
)
@click.option(
    "--device",
    default="auto",
    show_default=True,
    help="cpu, cuda, cuda:N, or auto (cuda when available).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Timed steps (the median is kept).",
)
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Untimed steps first.",
)
@click.option(
    "--threads",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="torch CPU threads (0 = torch's default).",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--offload",
    default="none",
    show_default=True,
    help="Also profile with activations and/or optimizer in host memory (compared with none).",
)
@click.option(
    "--layers",
    is_flag=True,
    help="Also time every leaf module (forward and backward): a stand-in profile for "
    "--device standin:FILE (docs/standin.md); the planner reads it too.",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16", "fp16"]),
    default="fp32",
    show_default=True,
    help="With --layers: forward and loss under torch.autocast at this precision.",
)
@output_file("--out", "Write the profile JSON here (default: stdout).")
# Over 60 lines on purpose: a click command: its parameters and their checks, then one call.
def profile(
    arch: str,
    batch_size: int,
    hidden: int,
    image_size: int,
    classes: int,
    device: str,
    steps: int,
    warmup: int,
    threads: int,
    seed: int,
    offload: str,
    layers: bool,
    precision: str,
    out: str | None,
) -> None:
    """Measure one rank's step (forward, backward, optimizer, per-parameter gradient ready
    times) with no communication; writes the planner's profile JSON."""
    from gossipgrad.options import Offload, choice_set

    try:
        what = choice_set(Offload, offload, "--offload")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--offload") from exc
    if threads:
        torch.set_num_threads(threads)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    kwargs = dict(
        batch_size=batch_size,
        hidden=hidden,
        image_size=image_size,
        classes=classes,
        device=device,
        steps=steps,
        warmup=warmup,
        seed=seed,
    )
    if layers:
        if what:
            raise click.UsageError("--layers and --offload: profile one at a time")
        _layers(arch, kwargs, precision, out)
        return
    if precision != "fp32":
        raise click.UsageError("--precision needs --layers")
    try:
        run = ArchRun(arch, **kwargs)
        result = profile_arch(run)
        if what:
            result = _with_offload(result, profile_arch(run, offload=what))
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    write_output(json.dumps(result.to_json(), indent=2), out)
    p = result.profile
    click.echo(
        f"{p.model} batch {p.batch_size} on {p.device}: forward {p.forward_s * 1e3:.2f} "
        f"ms, backward {p.backward_s * 1e3:.2f} ms, optimizer {p.optimizer_s * 1e3:.2f} "
        f"ms (medians of {steps}); {p.param_bytes / 1e6:.2f} MB of parameters in "
        f"{len(p.buckets)} per-parameter buckets",
        err=True,
    )
    if not result.layout_order:
        click.echo(
            "note: backward produced gradients in a different order than reverse registration "
            "(how the engine groups buckets); the profile lists them in backward order",
            err=True,
        )


def _with_offload(without, with_):  # noqa: ANN001, ANN202 - StepProfile, imported lazily
    """``with_`` whose ``offload`` also holds both runs' peak device memory and step time."""
    import dataclasses

    a, b = without.profile, with_.profile
    report = {
        **with_.offload,
        "peak_memory_bytes": {"without": a.memory_bytes, "with": b.memory_bytes},
        "step_s": {"without": a.compute_s, "with": b.compute_s},
    }
    moved = report["activation_bytes_to_host_per_step"] / 1e6
    peak = (
        "no device memory on a CPU"
        if a.memory_bytes is None
        else f"peak device memory {a.memory_bytes / 1e6:.1f} -> {b.memory_bytes / 1e6:.1f} MB"
    )
    click.echo(
        f"offload {','.join(report['what'])}: {moved:.1f} MB of saved activations to "
        f"host per step, {report['optimizer_host_bytes'] / 1e6:.1f} MB of optimizer in "
        f"host memory; {peak}; step {a.compute_s * 1e3:.1f} -> {b.compute_s * 1e3:.1f} ms",
        err=True,
    )
    return dataclasses.replace(with_, offload=report)


def _layers(arch: str, kwargs: dict, precision: str, out: str | None) -> None:
    """``--layers``: the measured stand-in profile (gossipgrad.tools.measure.layers)."""
    from gossipgrad.tools.measure.layers import profile_arch_layers

    k = kwargs
    command = (
        f"gossipgrad profile -a {arch} -b {k['batch_size']} --hidden {k['hidden']} "
        f"--image-size {k['image_size']} --device {k['device']} --precision {precision} "
        f"--steps {k['steps']} --warmup {k['warmup']} --seed {k['seed']} --layers"
    )
    try:
        result = profile_arch_layers(ArchRun(arch, **kwargs), precision, command)
    except (ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    write_output(json.dumps(result.to_json(), indent=1), out)
    p, cover = result.planner, result.source["layers_coverage"]
    click.echo(
        f"{p.model} batch {p.batch_size} on {p.device}: step {p.local_step_s * 1e3:.2f} ms "
        f"(forward {p.forward_s * 1e3:.2f}, backward {p.backward_s * 1e3:.2f}, optimizer "
        f"{p.optimizer_s * 1e3:.2f}); {len(result.layers)} leaf modules covered "
        f"{cover['forward']} of forward and {cover['backward']} of backward before scaling",
        err=True,
    )
