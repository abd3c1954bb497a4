"""Training configuration: one dataclass, validated without any communication.

Precedence, documented once: command-line flag > ``GOSSIPGRAD_<OPTION>`` environment
variable > ``--config`` file (TOML or YAML) > the defaults below.
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


@dataclass
class TrainConfig:
    arch: str = "mlp"
    dataset: str = "digits"
    data: str | None = None
    synthetic: bool = False
    hidden: int = 0
    image_size: int = 224
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
    shuffle_every: int = 1
    shuffle_samples: int = 4

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
                     "checkpoint_every", "hidden"):
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
        local = {"metrics_out", "progress", "workers", "run_dir", "resume", "data"}
        shared = {k: v for k, v in self.to_dict().items() if k not in local}
        digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1


def _choice(option: str, value: str, enum_type: type) -> None:
    values = [e.value for e in enum_type]
    if value not in values:
        raise ValueError(f"unknown {option} {value!r} (--{option}); choose one of: "
                         f"{', '.join(values)}")
