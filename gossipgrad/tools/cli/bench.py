"""``gossipgrad bench``: benchmarks a user runs on their own cluster; each prints one JSON
object on rank 0.

    mpiexec -n 2 gossipgrad bench exchange --sizes-mb 1,100
    mpiexec -n 2 gossipgrad bench overlap --comm-fraction 0.5
    mpiexec -n 4 gossipgrad bench shuffle --steps 300 --reps 3
    python scripts/emucluster.py run -n 8 --rate 1gbit -- gossipgrad bench strategies --png s.png
    mpiexec -n 4 gossipgrad bench tta --strategies gossip,allreduce --target 0.9
    gossipgrad bench standin --profile resnet50 --dilate 10        # the stand-in accelerator

See docs/benchmarks.md for what each measures and the numbers they produced. The studies
that validate the project's own claims (plan-validate, stragglers, ps-lag, convergence) are
``python -m lab ...`` in a checkout (lab/, not installed).
"""

# Over 300 lines on purpose: click boilerplate of five benchmark commands, each a thin parse-
# and-call.

from __future__ import annotations

import json
import logging
from typing import Any

import click

from gossipgrad.cli.options import BUCKET_MB, COMM_TIMEOUT, GOSSIP_MIX, timed_blocks
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ShuffleOptions
from gossipgrad.runtime import init
from gossipgrad.tools.bench import shuffle_cost
from gossipgrad.tools.bench.codecs import run_codecs
from gossipgrad.tools.bench.common import parse_sizes_mb
from gossipgrad.tools.bench.exchange import run_exchange
from gossipgrad.tools.bench.overlap import run_overlap
from gossipgrad.tools.bench.strategies import markdown_table, plot_png, run_strategies
from gossipgrad.tools.cli.bench_standin import DILATE, STANDIN_DEVICE, standin, standin_models
from gossipgrad.tools.cli.bench_tta import tta
from gossipgrad.tools.cli.output import output_file, run_bench

log = logging.getLogger("gossipgrad")

_REPS = click.option(
    "--reps",
    type=click.IntRange(1),
    default=10,
    show_default=True,
    help="Timed repetitions (the median is reported).",
)
_WARMUP = click.option(
    "--warmup",
    type=click.IntRange(0),
    default=2,
    show_default=True,
    help="Untimed repetitions first.",
)


_run = run_bench  # every bench command below prints one record, on rank 0


@click.group()
def bench() -> None:
    """Measure the runtime on your cluster: exchange vs raw MPI, overlap, strategies side
    by side, time to accuracy, the shuffle's cost."""


@bench.command()
@click.option(
    "--sizes-mb", default="1,100", show_default=True, help="Comma-separated model sizes in MiB."
)
@BUCKET_MB
@click.option(
    "--cprofile",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Add the N functions with the most own time in exchange_mix (rank 0).",
)
@_REPS
@_WARMUP
@COMM_TIMEOUT
def exchange(
    sizes_mb: str, bucket_mb: float, cprofile: int, reps: int, warmup: int, comm_timeout: float
) -> None:
    """gossipgrad's bucketed exchange (comm thread) vs one raw MPI Sendrecv of the same bytes."""
    try:
        sizes = parse_sizes_mb(sizes_mb)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    _run(
        comm_timeout,
        lambda comm: run_exchange(comm, sizes, bucket_mb, reps, warmup, cprofile=cprofile),
    )


@bench.command()
@click.option(
    "--width",
    type=click.IntRange(1),
    default=1024,
    show_default=True,
    help="Features of each Linear layer.",
)
@click.option("--layers", type=click.IntRange(1), default=8, show_default=True)
@click.option("--mix", type=click.Choice(["param", "grad"]), default="param", show_default=True)
@click.option(
    "--comm-fraction",
    type=float,
    default=0.5,
    show_default=True,
    help="Choose the batch so the exchange takes this fraction of backward.",
)
@click.option(
    "--batch",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Samples per rank per step (0 = calibrate from --comm-fraction).",
)
@click.option(
    "--bucket-mb", type=click.FloatRange(0, min_open=True), default=4.0, show_default=True
)
@click.option(
    "--staleness",
    type=click.IntRange(0, 1),
    default=0,
    show_default=True,
    help="Of the overlapped configuration (1: complete each exchange at the next "
    "step, behind its forward and backward).",
)
@click.option(
    "--steps", type=click.IntRange(1), default=4, show_default=True, help="Timed steps per block."
)
@click.option(
    "--reps",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Blocks per configuration (the median is reported).",
)
@COMM_TIMEOUT
def overlap(
    width: int,
    layers: int,
    mix: str,
    comm_fraction: float,
    batch: int,
    bucket_mb: float,
    staleness: int,
    steps: int,
    reps: int,
    comm_timeout: float,
) -> None:
    """Step time: compute only vs blocking exchange vs overlapped exchange."""
    _run(
        comm_timeout,
        lambda comm: run_overlap(
            comm, width, layers, mix, comm_fraction, batch, bucket_mb, steps, reps, staleness
        ),
    )


@bench.command()
@click.option(
    "--strategies",
    default="gossip,allreduce,local",
    show_default=True,
    help="Comma-separated strategy names (any the engine factory knows).",
)
@click.option("--width", type=click.IntRange(1), default=1024, show_default=True)
@click.option(
    "--layers",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Linear(width, width) layers: 8 x 1024 is a 33.6 MB model.",
)
@click.option(
    "--model",
    type=click.Choice(["stack", "fc-head"]),
    default="stack",
    show_default=True,
    help="stack: --layers x Linear(--width); fc-head: the Linear layers of --dims (FC-heavy).",
)
@click.option(
    "--dims",
    default="25088,4096,4096,1000",
    show_default=True,
    help="Sizes of the fc-head (the VGG-16 head by default).",
)
@click.option(
    "--factors",
    default="off",
    show_default=True,
    help="Comma-separated sufficient-factor settings (on, off, auto): one "
    "contender each for strategies that can send factors.",
)
@click.option(
    "--wires",
    default="fp32",
    show_default=True,
    help="Comma-separated wire codecs: one contender each for strategies that take one "
    "(named gossip+bf16; ddp+bf16 is DDP's own compression hook). A name in --strategies "
    "may carry its own, e.g. gossip+fp8.",
)
@click.option(
    "--together",
    type=click.Choice(["all", "strategy", "one"]),
    default="all",
    show_default=True,
    help="Which contenders are alive and rotate together "
    "(strategy: one strategy's at a time; one: each alone).",
)
@click.option(
    "--batch",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Samples per rank per step (small: communication-bound).",
)
@GOSSIP_MIX
@BUCKET_MB
@click.option("--overlap/--no-overlap", default=True, show_default=True)
@click.option(
    "--staleness",
    type=click.IntRange(0, 1),
    default=0,
    show_default=True,
    help="For gossip and allreduce (1: complete each exchange at the next step).",
)
@timed_blocks(
    3,
    "Timed steps per block.",
    "Timed blocks per strategy (the median is reported).",
    "Untimed blocks per strategy first.",
)
@output_file("--png", "Write a bar chart here (rank 0; needs matplotlib).")
@output_file("--markdown", "Write a Markdown table here (rank 0).")
# Over 60 lines on purpose: a click command: its parameters and their checks, then one call.
@STANDIN_DEVICE
@DILATE
@COMM_TIMEOUT
@click.pass_context
def strategies(
    ctx: click.Context,
    strategies: str,
    width: int,
    layers: int,
    model: str,
    dims: str,
    factors: str,
    wires: str,
    together: str,
    batch: int,
    mix: str,
    bucket_mb: float,
    overlap: bool,
    staleness: int,
    steps: int,
    reps: int,
    warmup: int,
    png: str | None,
    markdown: str | None,
    device: str,
    dilate: float,
    comm_timeout: float,
) -> None:
    """gossip vs allreduce vs local on the same model, ranks and links, in one launch."""
    devices = standin_models(ctx, device, dilate)  # --device standin:PROFILE, else None
    if devices is not None and ctx.get_parameter_source("batch").name == "DEFAULT":
        batch = devices.profile.batch_size
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    settings = tuple(f.strip() for f in factors.split(",") if f.strip())
    codecs = tuple(w.strip() for w in wires.split(",") if w.strip())
    try:
        sizes = tuple(int(d) for d in dims.split(",")) if model == "fc-head" else None
    except ValueError:
        raise click.BadParameter(
            f"{dims!r}: comma-separated layer sizes, e.g. 25088,4096,4096,1000", param_hint="--dims"
        ) from None

    def body(comm: Any) -> dict[str, Any]:
        record = run_strategies(
            comm,
            names,
            width,
            layers,
            batch,
            mix,
            bucket_mb,
            overlap,
            steps,
            reps,
            warmup,
            staleness,
            settings,
            sizes,
            together,
            devices,
            wires=codecs,
        )
        if comm.rank == 0 and markdown:
            with open(markdown, "w", encoding="utf-8") as f:
                f.write(markdown_table(record))
        if comm.rank == 0 and png:
            plot_png(record, png)
        return record

    _run(comm_timeout, body)


@bench.command("codecs")
@click.option(
    "--strategies",
    default="gossip,allreduce,ps",
    show_default=True,
    help="Comma-separated strategies (each runs every codec it accepts).",
)
@click.option(
    "--wires",
    default="fp32,bf16,fp16,fp8",
    show_default=True,
    help="Comma-separated wire codecs.",
)
@click.option("--arch", default="mlp", show_default=True)
@click.option("--dataset", default="digits", show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=32, show_default=True)
@click.option("--steps", type=click.IntRange(1), default=40, show_default=True)
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True)
@COMM_TIMEOUT
def codecs(
    strategies: str,
    wires: str,
    arch: str,
    dataset: str,
    batch_size: int,
    steps: int,
    warmup: int,
    comm_timeout: float,
) -> None:
    """Bytes per step and encode/decode time per codec, on the digits job."""
    names = [s.strip() for s in strategies.split(",") if s.strip()]
    codec_names = [w.strip() for w in wires.split(",") if w.strip()]
    _run(
        comm_timeout,
        lambda comm: run_codecs(comm, names, codec_names, arch, dataset, batch_size, steps, warmup),
    )


@bench.command("shuffle")
@click.option("--steps", type=int, default=300, show_default=True, help="Steps per run.")
@click.option("--reps", type=int, default=3, show_default=True, help="Runs of each setting.")
@click.option(
    "--samples",
    type=int,
    default=ShuffleOptions().shuffle_samples,
    show_default=True,
    help="--shuffle-samples.",
)
@click.option(
    "--every",
    type=int,
    default=ShuffleOptions().shuffle_every,
    show_default=True,
    help="--shuffle-every.",
)
@click.option("--arch", default="mlp", show_default=True)
@click.option("--hidden", type=int, default=0, show_default=True)
def shuffle(steps: int, reps: int, samples: int, every: int, arch: str, hidden: int) -> None:
    """Step time with the sample shuffle on vs off (JSON on rank 0)."""
    comm = init(configure=True)
    logging.getLogger("gossipgrad").setLevel(logging.WARNING)
    base = TrainConfig.from_flags(
        arch=arch,
        hidden=hidden,
        epochs=10_000,
        max_steps=steps,
        shuffle_samples=samples,
        shuffle_every=every,
        eval_every=10_000,
    )
    result = shuffle_cost.measure(comm, base, reps)
    if comm.rank == 0:
        click.echo(json.dumps(result))


bench.add_command(tta)
bench.add_command(standin)
