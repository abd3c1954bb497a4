"""In-memory datasets: scikit-learn's digits (the embedded default), generated class
templates and synthetic tensors.

digits: 1,797 8x8 grey images of 10 digits, scaled to [0, 1], with a fixed stratified
80/20 train/test split (seed 0), identical on every rank and every run.
templates: 10,000 generated 16x16 samples of 10 shifted, scaled and noised class templates
(8,000 train, 2,000 test; :mod:`gossipgrad.data.templates`).
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class TensorData:
    """Train and test tensors with their sample shape and class count."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: int

    @property
    def in_shape(self) -> tuple[int, ...]:
        return tuple(self.train_x.shape[1:])


def digits() -> TensorData:
    x, y = _digits_arrays()
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    test = _stratified_test_mask(y, fraction=0.2, seed=0)
    return TensorData(
        "digits",
        torch.from_numpy(x[~test]),
        torch.from_numpy(y[~test]),
        torch.from_numpy(x[test]),
        torch.from_numpy(y[test]),
        classes=10,
    )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """Read the CSV that scikit-learn ships, without importing scikit-learn (2 s per rank)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise ValueError("the digits dataset comes with scikit-learn: pip install scikit-learn")
    path = os.path.join(os.path.dirname(spec.origin), "datasets", "data", "digits.csv.gz")
    raw = np.loadtxt(path, delimiter=",", dtype=np.float64)
    return raw[:, :-1], raw[:, -1].astype(np.int64)


def _stratified_test_mask(y: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """A fixed test set holding ``fraction`` of every class (rounded), seeded."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(y), dtype=bool)
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        mask[rng.choice(idx, size=int(round(fraction * len(idx))), replace=False)] = True
    return mask


def synthetic(
    samples: int = 4096, shape: tuple[int, ...] = (1, 8, 8), classes: int = 10, seed: int = 0
) -> TensorData:
    """Random inputs whose label is a fixed random linear function of them (learnable)."""
    if samples < 2:
        raise ValueError(f"synthetic samples must be >= 2, got {samples}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, *shape, generator=g)
    w = torch.randn(int(np.prod(shape)), classes, generator=g)
    y = (x.reshape(samples, -1) @ w).argmax(dim=1)
    cut = max(1, samples // 5)
    return TensorData("synthetic", x[cut:], y[cut:], x[:cut], y[:cut], classes)


def templates() -> TensorData:
    """The generated class-template task (:mod:`gossipgrad.data.templates`)."""
    from gossipgrad.data import templates as gen

    train_x, train_y, test_x, test_y = gen.splits()
    return TensorData(
        "templates",
        torch.from_numpy(train_x),
        torch.from_numpy(train_y),
        torch.from_numpy(test_x),
        torch.from_numpy(test_y),
        classes=gen.CLASSES,
    )


DATASETS = {"digits": digits, "templates": templates, "synthetic": synthetic}


def load_tensor_data(name: str) -> TensorData:
    if name not in DATASETS:
        raise ValueError(
            f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}, "
            "or pass --data DIR for an ImageFolder"
        )
    return DATASETS[name]()
