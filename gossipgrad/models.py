"""The model registry (name -> constructor) and the facts about the models: input shapes,
default class counts, which get the ImageNet recipe. torchvision models are imported on
demand; the GPT is :mod:`gossipgrad.gpt`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gossipgrad import gpt as _gpt


def mlp(in_shape: tuple[int, ...], classes: int, hidden: int = 128) -> nn.Module:
    """A two-hidden-layer perceptron; ``hidden`` widens it (benchmarks use large widths)."""
    n = 1
    for d in in_shape:
        n *= d
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(n, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def cnn(in_shape: tuple[int, ...], classes: int, hidden: int = 32) -> nn.Module:
    """A small convolutional net for 1- or 3-channel images."""
    c = in_shape[0]
    return nn.Sequential(
        nn.Conv2d(c, hidden, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(hidden, 2 * hidden, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * hidden, classes),
    )


def _torchvision(name: str) -> Callable[..., nn.Module]:
    def build(in_shape: tuple[int, ...], classes: int, hidden: int = 0) -> nn.Module:
        try:
            import torchvision.models as tvm
        except ImportError as exc:
            raise ValueError(
                f"model {name!r} needs torchvision: pip install 'gossipgrad[vision]'"
            ) from exc
        kwargs = {"weights": None, "num_classes": classes}
        if name == "googlenet":
            kwargs.update(aux_logits=True, init_weights=True)
        return getattr(tvm, name)(**kwargs)

    return build


#: Models that get the ImageNet recipe as their defaults (``engine.config.imagenet_defaults``).
IMAGENET_ARCHS = ("resnet18", "resnet50", "googlenet", "vgg16")

MODELS: dict[str, Callable[..., nn.Module]] = {
    "mlp": mlp,
    "cnn": cnn,
    "resnet18": _torchvision("resnet18"),
    "resnet50": _torchvision("resnet50"),
    "googlenet": _torchvision("googlenet"),
    "vgg16": _torchvision("vgg16"),
    "gpt": _gpt.gpt,
}

#: Models built for digits-sized inputs (:data:`DIGITS_SHAPE`, 10 classes); the others are
#: torchvision's ImageNet models (3 x image_size^2, 1000 classes).
SMALL_MODELS = ("mlp", "cnn")
DIGITS_SHAPE = (1, 8, 8)
#: Models of token sequences: input ``(context,)`` token ids, one prediction per position
#: over a 256-byte vocabulary (text data: ``gossipgrad.data.text``).
SEQUENCE_MODELS = ("gpt",)
BYTE_VOCAB = 256


def input_shape(arch: str, image_size: int) -> tuple[int, ...]:
    """Sample shape: digits' 1x8x8 for mlp/cnn, gpt's default context, 3 x image_size^2
    for torchvision models.

    >>> input_shape("mlp", 224), input_shape("resnet18", 64), input_shape("gpt", 224)
    ((1, 8, 8), (3, 64, 64), (128,))
    """
    if arch in SEQUENCE_MODELS:
        return (_gpt.CONTEXT,)
    return DIGITS_SHAPE if arch in SMALL_MODELS else (3, image_size, image_size)


def default_classes(arch: str) -> int:
    """Output classes when none are given: 10 for mlp/cnn (digits), 256 byte values for
    gpt, 1000 for the torchvision models (ImageNet-1k)."""
    if arch in SEQUENCE_MODELS:
        return BYTE_VOCAB
    return 10 if arch in SMALL_MODELS else 1000


def build_model(
    name: str,
    in_shape: tuple[int, ...],
    classes: int,
    hidden: int = 0,
    layers: int = 0,
    heads: int = 0,
) -> nn.Module:
    """Construct ``name``; ``hidden`` (width) applies to mlp/cnn/gpt, ``layers`` and
    ``heads`` to gpt; 0 keeps the model's default."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    if hidden < 0:
        raise ValueError(f"--hidden must be >= 0, got {hidden}")
    if name in SEQUENCE_MODELS:
        return MODELS[name](in_shape, classes, hidden, layers, heads)
    if hidden and name in SMALL_MODELS:
        return MODELS[name](in_shape, classes, hidden)
    return MODELS[name](in_shape, classes)


def logits(output: torch.Tensor | tuple) -> torch.Tensor:
    """The main logits of a model's output (GoogLeNet returns auxiliary outputs in train)."""
    return output.logits if hasattr(output, "logits") else output


def loss_fn(output: torch.Tensor | tuple, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy on the main logits, plus 0.3x each auxiliary head (GoogLeNet's recipe);
    a sequence's ``[batch, time, classes]`` logits are averaged over every position."""
    out = logits(output)
    if out.dim() == target.dim() + 1 and out.dim() > 2:  # [B, T, V] against [B, T]
        return nn.functional.cross_entropy(out.flatten(0, -2), target.flatten())
    loss = nn.functional.cross_entropy(out, target)
    for aux in (getattr(output, "aux_logits1", None), getattr(output, "aux_logits2", None)):
        if aux is not None:
            loss = loss + 0.3 * nn.functional.cross_entropy(aux, target)
    return loss
