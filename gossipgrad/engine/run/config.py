"""The training configuration: the option objects of :mod:`gossipgrad.options`, composed.

Precedence, documented once: command-line flag > ``GOSSIPGRAD_<OPTION>`` environment
variable > ``--config`` file (TOML or YAML) > the defaults of the option objects. For the
ImageNet models (:data:`gossipgrad.models.IMAGENET_ARCHS`) the defaults of the options in
:func:`imagenet_defaults` are the ImageNet recipe instead, for gpt those of
:func:`gpt_defaults` (:func:`arch_defaults`); an option given by flag, environment or file
still wins.

    >>> cfg = TrainConfig.from_flags(strategy="allreduce", lr=0.05, batch_size=64)
    >>> cfg.exchange.strategy, cfg.optim.lr, cfg.data.batch_size
    ('allreduce', 0.05, 64)
    >>> TrainConfig.from_flags(sync_every=-1)  # the CLI spells it --sync-every
    Traceback (most recent call last):
    ...
    ValueError: sync_every must be >= 0, got -1
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from gossipgrad.comm.schedule import resolve_topology
from gossipgrad.data.text import is_text
from gossipgrad.gpt import check_shape
from gossipgrad.models import IMAGENET_ARCHS, MODELS, SEQUENCE_MODELS
from gossipgrad.options import (
    GROUPS,
    DataOptions,
    ExchangeOptions,
    ModelOptions,
    Offload,
    OnFailure,
    Optimizer,
    OptimOptions,
    RunOptions,
    ShuffleOptions,
    SufficientFactors,
    at_least,
    extras,
    mix_follows_strategy,
    opt,
    spell,
)


def imagenet_defaults(batch_size: int) -> dict[str, float | int | bool]:
    """The ImageNet recipe (Goyal et al. 2017, "ImageNet in 1 hour"), per option name.

    lr 0.1 per 256 images: ``--lr`` is 0.1 x batch_size / 256 per rank's batch and
    ``--scale-lr`` multiplies it by the number of ranks, so the global rate is
    0.1 x global batch / 256; 5 warm-up epochs across all ranks; weight decay 1e-4 and
    momentum 0.9; 90 epochs, with cosine decay (:func:`gossipgrad.engine.run.loop.lr_at`)
    instead of steps at epochs 30/60/80.
    """
    return {
        "lr": 0.1 * batch_size / 256,
        "scale_lr": True,
        "warmup_epochs": 5.0,
        "weight_decay": 1e-4,
        "momentum": 0.9,
        "epochs": 90,
    }


def gpt_defaults(batch_size: int) -> dict[str, float | int | bool | str]:
    """A small GPT's recipe (as nanoGPT's character-level one): AdamW at lr 1e-3 without
    weight decay, on the embedded text corpus (``--dataset text``)."""
    return {"dataset": "text", "optimizer": "adamw", "lr": 1e-3, "weight_decay": 0.0}


def arch_defaults(arch: str, batch_size: int) -> dict[str, float | int | bool | str]:
    """The defaults ``arch`` trains with instead of the option objects' (an option given by
    flag, environment or file still wins): the ImageNet recipe, the GPT's, or none."""
    if arch in IMAGENET_ARCHS:
        return imagenet_defaults(batch_size)
    if arch in SEQUENCE_MODELS:
        return gpt_defaults(batch_size)
    return {}


#: ``--optimizer`` choices that scale steps per parameter (the default mix follows them).
ADAPTIVE_CHOICES = frozenset({Optimizer.ADAM.value, Optimizer.ADAMW.value})

#: Options that may differ between ranks (paths, logging): left out of the fingerprint.
RANK_LOCAL = frozenset(
    {"metrics_out", "progress", "workers", "run_dir", "resume", "data", "device"}
)


@dataclass(frozen=True)
class TrainConfig:
    """One training job's options, validated at construction (no communication needed).

    ``arch``, ``hidden`` and ``pretrained`` (torchvision's ImageNet weights) choose the
    model; the groups hold the rest. Build it from flat
    option names with :meth:`from_flags`; :meth:`to_dict` gives them back.
    """

    arch: str = opt("mlp", "Model.", aliases=("-a",), choices=lambda: list(MODELS))
    hidden: int = opt(0, "Width of mlp/cnn/gpt (0 = the model's default).")
    pretrained: bool = opt(
        False, "Start from torchvision's ImageNet weights of --arch (fetched by rank 0)."
    )
    optim: OptimOptions = field(default_factory=OptimOptions)
    exchange: ExchangeOptions = field(default_factory=ExchangeOptions)
    data: DataOptions = field(default_factory=DataOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    shuffle: ShuffleOptions = field(default_factory=ShuffleOptions)
    run: RunOptions = field(default_factory=RunOptions)

    def __post_init__(self) -> None:
        if self.arch not in MODELS:
            raise ValueError(
                f"unknown model {self.arch!r} ({spell('--arch')}); choose one of: "
                f"{', '.join(MODELS)}"
            )
        at_least(self.hidden, 0, "--hidden")
        if self.pretrained and self.arch not in IMAGENET_ARCHS:
            raise ValueError(
                f"{spell('--pretrained', True)} loads torchvision's ImageNet weights: it needs "
                f"{spell('--arch')} one of {', '.join(IMAGENET_ARCHS)}, not {self.arch!r}"
            )
        adaptive = self.optim.optimizer.value in ADAPTIVE_CHOICES  # the mix's default rule
        object.__setattr__(self, "exchange", self.exchange.bind(adaptive))
        self._check_sequences()
        spec = self.exchange.spec
        if self.run.on_failure is not OnFailure.ABORT:
            why = spec.cannot_shrink(self.exchange)
            if why is not None:
                value = self.run.on_failure.value
                raise ValueError(f"{spell('--on-failure', value)} cannot work: {why}")
            self._no_factors_unless_asked()  # a factor path cannot follow a shrink
        device = self.run.device_spec
        if device is not None and not device.real_activations:
            if self.exchange.sufficient_factors is SufficientFactors.ON:
                raise ValueError(
                    f"{spell('--sufficient-factors', 'on')} is not available on "
                    f"{spell('--device', device.name)}: its activations are not the batch's"
                )
            self._no_factors_unless_asked()
        if Offload.OPTIMIZER in self.run.offload and spec.wraps_optimizer_class:
            raise ValueError(
                f"{spell('--offload', 'optimizer')} is not available with "
                f"{spell('--strategy', spec.name)}: it wraps the optimizer's class itself; "
                "drop one of them"
            )

    def _check_sequences(self) -> None:
        """A sequence model trains on text and text needs one; its shape must build."""
        sequence, text = self.arch in SEQUENCE_MODELS, is_text(self.data.dataset)
        if sequence and not (text and self.data.data is None and not self.data.synthetic):
            raise ValueError(
                f"{spell('--arch', self.arch)} trains on text: pass "
                f"{spell('--dataset', 'text')} (the embedded corpus) or "
                f"{spell('--dataset', 'text:PATH')}, without --data or --synthetic"
            )
        if text and not sequence and self.data.data is None:
            raise ValueError(
                f"{spell('--dataset', self.data.dataset)} is byte-level text: it needs a "
                f"sequence model, {spell('--arch', SEQUENCE_MODELS[0])}"
            )
        shaped = {"--layers": self.model.layers, "--heads": self.model.heads}
        shaped["--context"] = self.data.context
        for flag, value in shaped.items():
            if value and not sequence:
                raise ValueError(
                    f"{spell(flag, value)} shapes a sequence model "
                    f"({', '.join(SEQUENCE_MODELS)}), not {spell('--arch', self.arch)}; drop it"
                )
        if sequence:
            check_shape(self.hidden, self.model.layers, self.model.heads, self.data.context)

    def _no_factors_unless_asked(self) -> None:
        """``--sufficient-factors auto`` resolves to off (written once, here: where ranks
        may die or the device computes no real activations, auto sends none)."""
        if self.exchange.sufficient_factors is SufficientFactors.AUTO:
            off = dataclasses.replace(self.exchange, sufficient_factors=SufficientFactors.OFF)
            object.__setattr__(self, "exchange", off)

    @classmethod
    def from_flags(cls, **flags: Any) -> TrainConfig:
        """Build from flat option names (``lr=0.1, strategy="gossip", ...``); unknown names
        raise ValueError. Missing ones take their defaults."""
        plugged = {o.name for o in extras()}  # plugins' options: the exchange's extras
        known = (
            {"arch", "hidden", "pretrained"}
            | plugged
            | {f.name for g in GROUPS.values() for f in dataclasses.fields(g) if f.name != "extras"}
        )
        unknown = sorted(set(flags) - known)
        if unknown:
            raise ValueError(f"unknown option(s): {', '.join(unknown)}")
        top = {k: flags[k] for k in ("arch", "hidden", "pretrained") if k in flags}
        groups = {name: group.pick(flags) for name, group in GROUPS.items()}
        given = tuple(sorted((k, flags[k]) for k in plugged if k in flags))
        if given:
            groups["exchange"]["extras"] = given
        return cls(**top, **{name: GROUPS[name](**kw) for name, kw in groups.items()})

    def replace(self, **flags: Any) -> TrainConfig:
        """A copy with some flat options changed (validated again; a new strategy takes
        its own ``mix`` unless ``mix`` is given too)."""
        current = self.to_dict()
        if "strategy" in flags and "mix" not in flags:
            flags = {
                **flags,
                **mix_follows_strategy(self.exchange, {"strategy": flags["strategy"]}),
            }
        return TrainConfig.from_flags(**{**current, **flags})

    @property
    def seed(self) -> int:
        """The one seed: schedule rotation, data order and partition, shuffle plan."""
        return self.exchange.seed

    def check_size(self, size: int) -> None:
        """Raise ValueError for options that cannot work at ``size`` ranks."""
        resolve_topology(self.exchange.rank_topology, size)  # gossip-node's nodes: later

    def to_dict(self) -> dict[str, Any]:
        """Every option by its flat name (enums as their strings): what is logged, saved in
        checkpoints and fingerprinted."""
        out: dict[str, Any] = {
            "arch": self.arch,
            "hidden": self.hidden,
            "pretrained": self.pretrained,
        }
        for name in GROUPS:
            for key, value in dataclasses.asdict(getattr(self, name)).items():
                out[key] = value.value if hasattr(value, "value") else value
        out.update(dict(out.pop("extras")))
        return out

    def fingerprint(self) -> int:
        """A hash of everything that must be identical on every rank."""
        shared = {k: v for k, v in self.to_dict().items() if k not in RANK_LOCAL}
        digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:8], "little") >> 1
