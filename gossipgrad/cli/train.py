"""``gossipgrad train``: parse and validate flags, build the config, call the engine.

    mpiexec -n 4 gossipgrad train                # digits, MLP, gossip: the quick start
    srun --mpi=pmi2 gossipgrad train -a resnet50 --data /datasets/imagenet \
        --run-dir runs/r50 --resume auto
    mpiexec -n 2 gossipgrad train -a resnet50 --synthetic -b 8 --max-steps 10   # images/s

Every option is declared once, in the option table (:mod:`gossipgrad.options`), and can also
come from ``GOSSIPGRAD_<OPTION>`` or a ``--config`` file; precedence is flag > environment >
file > default. ImageNet models (resnet18, resnet50, googlenet, vgg16) default to the
ImageNet recipe of ``imagenet_defaults``, gpt to ``gpt_defaults``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import click

from gossipgrad import runtime, startup
from gossipgrad.cli.options import click_option, load_config_file, train_table
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig, arch_defaults
from gossipgrad.engine.run.membership import check_support, leads
from gossipgrad.engine.run.metrics import to_json
from gossipgrad.settings import table_text

log = logging.getLogger("gossipgrad")


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
    *(click_option(o) for o in train_table() if o.cli),
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
    click.option("-v", "--verbose", is_flag=True, help="Log on every rank at DEBUG."),
]


def _apply(options: list[Callable]) -> Callable:
    def deco(fn: Callable) -> Callable:
        for o in reversed(options):
            fn = o(fn)
        return fn

    return deco


def resolve_defaults(ctx: click.Context, flags: dict[str, Any]) -> dict[str, Any]:
    """``flags`` with the model's recipe (ImageNet's, gpt's) for options that took the
    built-in default."""
    out = dict(flags)
    for name, value in arch_defaults(flags["arch"], flags["batch_size"]).items():
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
    comm = runtime.init(cfg.run.comm_timeout, verbose, configure=True)
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
