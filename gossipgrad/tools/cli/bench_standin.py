"""``gossipgrad bench standin``: is the stand-in accelerator what its profile says?

    gossipgrad bench standin --profile resnet50 --dilate 10
    mpiexec -n 8 gossipgrad bench standin --profile resnet50 --dilate 10 --strategies local,gossip

Parses the flags and calls :func:`gossipgrad.tools.bench.standin.run_standin`; the record's fields
are described there and in docs/standin.md.
"""

from __future__ import annotations

from typing import Any

import click

from gossipgrad.cli.options import BUCKET_MB, COMM_TIMEOUT, timed_blocks
from gossipgrad.tools.cli.output import run_bench

DILATE = click.option(
    "--dilate",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    show_default=True,
    help="Stand-in compute times x this (run behind links this many times slower).",
)

STANDIN_DEVICE = click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="cpu, or standin:PROFILE: every contender trains the profiled model on a stand-in "
    "accelerator (docs/standin.md) instead of the Linear stack; --batch defaults to the "
    "profile's.",
)


def standin_models(ctx: click.Context, device: str, dilate: float) -> Any:
    """The stand-in models of ``--device standin:PROFILE`` (None for cpu); a bad value or
    profile is a usage error naming it."""
    from gossipgrad.options import parse_device
    from gossipgrad.tools.bench.standin import StandinModels
    from gossipgrad.tools.devices.training import StandinDevice

    try:
        kind, profile = parse_device(device)
        if kind == StandinDevice.name:
            return StandinModels(profile or "", dilate)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param_hint="--device") from exc
    if kind != "cpu":
        raise click.BadParameter(f"{device!r}: cpu or standin:PROFILE", param_hint="--device")
    if dilate != 1.0:
        raise click.UsageError("--dilate needs --device standin:PROFILE")
    return None


@click.command("standin")
@click.option(
    "--profile",
    required=True,
    help="A shipped stand-in profile (resnet50, vgg16, googlenet, or a full name such as "
    "resnet50-p100-fp32-b32) or a JSON file from gossipgrad profile --layers.",
)
@DILATE
@click.option(
    "--strategies",
    default="local",
    show_default=True,
    help="Comma-separated strategies, each on its own model copy, one after the other.",
)
@click.option(
    "--batch",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Samples per rank per step (0: the profile's batch).",
)
@click.option(
    "--mix",
    type=click.Choice(["param", "grad"]),
    default="param",
    show_default=True,
    help="What gossip mixes.",
)
@BUCKET_MB
@timed_blocks(5, "Timed steps per block.", "Timed blocks per strategy (the median is reported).")
@COMM_TIMEOUT
def standin(
    profile: str,
    dilate: float,
    strategies: str,
    batch: int,
    mix: str,
    bucket_mb: float,
    steps: int,
    reps: int,
    warmup: int,
    comm_timeout: float,
) -> None:
    """Stand-in step time vs its profile, gradient-ready times, CPU per step (JSON)."""
    from gossipgrad.tools.bench.standin import run_standin

    names = tuple(s.strip() for s in strategies.split(",") if s.strip())

    def body(comm: Any) -> dict[str, Any]:
        return run_standin(comm, profile, dilate, names, batch, steps, reps, warmup, mix, bucket_mb)

    run_bench(comm_timeout, body)
