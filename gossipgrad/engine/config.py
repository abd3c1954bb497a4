"""Training configuration: one dataclass, validated without any communication.

Precedence, documented once: command-line flag > ``GOSSIPGRAD_<OPTION>`` environment
variable > ``--config`` file (TOML or YAML) > the defaults below. For the ImageNet models
(:data:`gossipgrad.models.IMAGENET_ARCHS`) the defaults of the options in
:func:`imagenet_defaults` are the ImageNet recipe instead; an option given by flag,
environment or file still wins.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from gossipgrad.comm.base import DEFAULT_TIMEOUT_S
from gossipgrad.comm.exchange import Strategy
from gossipgrad.comm.schedule import Topology, resolve_topology
from gossipgrad.data.partition import parse_partition
from gossipgrad.engine.distributed import Mix
from gossipgrad.models import MODELS


def imagenet_defaults(batch_size: int) -> dict[str, float | int | bool]:
    """The ImageNet recipe (Goyal et al. 2017, "ImageNet in 1 hour"), per option name.

    lr 0.1 per 256 images: ``--lr`` is 0.1 x batch_size / 256 per rank's batch and
    ``--scale-lr`` multiplies it by the number of ranks, so the global rate is
    0.1 x global batch / 256; 5 warm-up epochs across all ranks; weight decay 1e-4 and
    momentum 0.9; 90 epochs, with cosine decay (:func:`gossipgrad.engine.trainer.lr_at`)
    instead of steps at epochs 30/60/80.
    """
    return {"lr": 0.1 * batch_size / 256, "scale_lr": True, "warmup_epochs": 5.0,
            "weight_decay": 1e-4, "momentum": 0.9, "epochs": 90}


@dataclass
class TrainConfig:
    arch: str = "mlp"
    dataset: str = "digits"
    data: str | None = None
    synthetic: bool = False
    hidden: int = 0
    image_size: int = 224
    num_classes: int = 0
    batch_size: int = 32
    lr: float = 0.1
    momentum: float = 0.9
    weight_decay: float = 0.0
    epochs: int = 20
    max_steps: int = 0
    warmup_epochs: float = 0.0
    scale_lr: bool = False
    strategy: str = Strategy.GOSSIP.value
    topology: str = Topology.AUTO.value
    mix: str = Mix.PARAM.value
    staleness: int = 0
    sync_every: int = 0
    bucket_mb: float = 25.0
    overlap: bool = True
    seed: int = 0
    comm_timeout: float = DEFAULT_TIMEOUT_S
    eval_every: int = 1
    print_freq: int = 10
    metrics_out: str | None = None
    progress: bool = True
    workers: int = 2
    run_dir: str | None = None
    checkpoint_every: int = 0
    resume: str | None = None
    evaluate: bool = False
    skip_corrupt: bool = False
    partition: str = "iid"
    shuffle: bool = True
    shuffle_every: int = 2
    shuffle_samples: int = 8
    device: str = "auto"

    def validate(self, size: int = 1) -> None:
        """Raise ValueError naming the option for any value that cannot work."""
        if self.arch not in MODELS:
            raise ValueError(f"unknown model {self.arch!r} (--arch); choose one of: "
                             f"{', '.join(MODELS)}")
        if self.data is None and self.dataset not in ("digits", "synthetic"):
            raise ValueError(f"unknown dataset {self.dataset!r} (--dataset); choose one of: "
                             "digits, synthetic, or pass --data DIR for an ImageFolder")
        for name in ("batch_size", "epochs"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0, got "
                                 f"{getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"--lr must be > 0, got {self.lr}")
        for name in ("momentum", "weight_decay", "warmup_epochs", "max_steps", "sync_every",
                     "checkpoint_every", "hidden", "num_classes", "workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 0, got "
                                 f"{getattr(self, name)}")
        if self.shuffle_every <= 0 or self.shuffle_samples <= 0:
            raise ValueError("--shuffle-every and --shuffle-samples must be > 0")
        parse_partition(self.partition)
        if self.bucket_mb <= 0:
            raise ValueError(f"--bucket-mb must be > 0, got {self.bucket_mb}")
        if self.comm_timeout <= 0:
            raise ValueError(f"--comm-timeout must be > 0 seconds, got {self.comm_timeout}")
        if self.eval_every <= 0 or self.print_freq <= 0:
            raise ValueError("--eval-every and --print-freq must be > 0")
        if self.staleness not in (0, 1):
            raise ValueError(f"--staleness must be 0 or 1, got {self.staleness}")
        if self.image_size < 16:
            raise ValueError(f"--image-size must be >= 16, got {self.image_size}")
        if self.checkpoint_every and not self.run_dir:
            raise ValueError("--checkpoint-every needs --run-dir (where checkpoints go)")
        if self.resume == "auto" and not self.run_dir:
            raise ValueError("--resume auto needs --run-dir (where to look for checkpoints)")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device must be auto, cpu or cuda, got {self.device!r}")
        _choice("strategy", self.strategy, Strategy)
        if self.staleness and self.strategy in (Strategy.HOROVOD, Strategy.DDP):
            raise ValueError(f"--staleness 1 is not available with --strategy {self.strategy}: "
                             "it waits for every step's allreduce")
        _choice("mix", self.mix, Mix)
        _choice("topology", self.topology, Topology)
        resolve_topology(self.topology, size)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def fingerprint(self) -> int:
        """A hash of everything that must be identical on every rank."""
        local = {"metrics_out", "progress", "workers", "run_dir", "resume", "data", "device"}
        shared = {k: v for k, v in self.to_dict().items() if k not in local}
        digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1


def _choice(option: str, value: str, enum_type: type) -> None:
    values = [e.value for e in enum_type]
    if value not in values:
        raise ValueError(f"unknown {option} {value!r} (--{option}); choose one of: "
                         f"{', '.join(values)}")
