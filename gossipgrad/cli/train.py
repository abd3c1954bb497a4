"""``gossipgrad train``: parse and validate flags, build the config, call the engine.

    mpiexec -n 4 gossipgrad train                # digits, MLP, gossip: the quick start
    srun --mpi=pmi2 gossipgrad train -a resnet50 --data /datasets/imagenet
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

import click

from gossipgrad.cli.options import env_name, load_config_file
from gossipgrad.comm.exchange import Strategy
from gossipgrad.comm.schedule import Topology
from gossipgrad.engine.config import TrainConfig
from gossipgrad.engine.distributed import Mix
from gossipgrad.models import MODELS

log = logging.getLogger("gossipgrad")
D = TrainConfig()


def _opt(*decls: str, **kw: Any) -> Callable:
    long = next(d for d in decls if d.startswith("--"))
    kw.setdefault("show_default", True)
    return click.option(*decls, envvar=env_name(long.split("/")[0]), show_envvar=True, **kw)


def _choices(enum_type: type) -> click.Choice:
    return click.Choice([e.value for e in enum_type])


OPTIONS = [
    click.option("--config", type=click.Path(dir_okay=False), callback=load_config_file,
                 is_eager=True, expose_value=False,
                 help="TOML or YAML file of options (flag > env > file > default)."),
    _opt("-a", "--arch", type=click.Choice(list(MODELS)), default=D.arch, help="Model."),
    _opt("--dataset", default=D.dataset, help="Built-in dataset: digits or synthetic."),
    _opt("--data", type=click.Path(), default=None,
         help="ImageFolder root holding train/ and val/ (overrides --dataset)."),
    _opt("--synthetic", is_flag=True, help="Generated tensors (throughput runs, no data)."),
    _opt("--hidden", type=int, default=D.hidden, help="Width of mlp/cnn (0 = default)."),
    _opt("--image-size", type=int, default=D.image_size, help="Crop size for image models."),
    _opt("-b", "--batch-size", type=int, default=D.batch_size, help="Samples per rank per step."),
    _opt("--lr", type=float, default=D.lr, help="Learning rate (per rank batch)."),
    _opt("--scale-lr/--no-scale-lr", default=D.scale_lr, help="Linear scaling: lr x size."),
    _opt("--warmup-epochs", type=float, default=D.warmup_epochs, help="Linear warm-up."),
    _opt("--momentum", type=float, default=D.momentum),
    _opt("--wd", "--weight-decay", "weight_decay", type=float, default=D.weight_decay),
    _opt("--epochs", type=int, default=D.epochs),
    _opt("--max-steps", type=int, default=D.max_steps, help="Stop after N steps (0 = no cap)."),
    _opt("--strategy", type=_choices(Strategy), default=D.strategy,
         help="gossip; allreduce or local (baselines); horovod (needs Horovod: "
              "bash scripts/install-horovod.sh) or ddp (torch DistributedDataParallel)."),
    _opt("--topology", type=_choices(Topology), default=D.topology,
         help="auto: hypercube for power-of-two sizes, else dissemination."),
    _opt("--mix", type=_choices(Mix), default=D.mix, help="What is averaged with the peer."),
    _opt("--staleness", type=click.IntRange(0, 1), default=D.staleness),
    _opt("--sync-every", type=int, default=D.sync_every, help="Global average every N steps."),
    _opt("--bucket-mb", type=float, default=D.bucket_mb),
    _opt("--overlap/--no-overlap", default=D.overlap, help="Exchange during backward."),
    _opt("--partition", default=D.partition,
         help="Initial split across ranks: iid, sorted (non-IID) or dirichlet:ALPHA."),
    _opt("--shuffle/--no-shuffle", default=D.shuffle,
         help="Background thread swapping samples between ranks."),
    _opt("--shuffle-every", type=int, default=D.shuffle_every, help="A round every N steps."),
    _opt("--shuffle-samples", type=int, default=D.shuffle_samples, help="Samples per round."),
    _opt("--seed", type=int, default=D.seed),
    _opt("--comm-timeout", type=float, default=D.comm_timeout,
         help="Seconds any wait may take before the job aborts."),
    _opt("--eval-every", type=int, default=D.eval_every, help="Evaluate every N epochs."),
    _opt("--print-freq", type=int, default=D.print_freq, help="Log a record every N steps."),
    _opt("--metrics-out", type=click.Path(dir_okay=False), default=None, help="JSON lines."),
    _opt("--progress/--no-progress", default=D.progress, help="Progress bar on rank 0."),
    _opt("-j", "--workers", type=int, default=D.workers, help="DataLoader workers per rank."),
    _opt("--run-dir", type=click.Path(file_okay=False), default=None,
         help="Checkpoints and metrics go here."),
    _opt("-v", "--verbose", is_flag=True, help="Log on every rank at DEBUG."),
]


def _apply(options: list[Callable]) -> Callable:
    def deco(fn: Callable) -> Callable:
        for o in reversed(options):
            fn = o(fn)
        return fn
    return deco


@click.command()
@_apply(OPTIONS)
def train(verbose: bool, **flags: Any) -> None:
    """Train a model with gossip (or a baseline strategy) across the launched ranks."""
    cfg = TrainConfig(**flags)
    try:
        cfg.validate()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    from gossipgrad.comm.base import CommError
    from gossipgrad.engine.trainer import train as run
    from gossipgrad.runtime import abort_job, init

    comm = init(cfg.comm_timeout, verbose)
    try:
        cfg.validate(comm.size)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if comm.rank == 0:
        log.info("configuration: %s", json.dumps(cfg.to_dict(), sort_keys=True))
    try:
        summary = run(cfg, comm)
    except (CommError, ValueError, RuntimeError, OSError) as exc:
        abort_job(comm, f"rank {comm.rank}: {exc}")
    except Exception:  # noqa: BLE001 - a bug: say where, then end every rank
        log.exception("rank %d: unexpected error", comm.rank)
        abort_job(comm, f"rank {comm.rank}: aborting the job after an unexpected error")
    if comm.rank == 0:
        click.echo(json.dumps(summary, sort_keys=True))
