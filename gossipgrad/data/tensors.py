"""In-memory datasets: scikit-learn's digits (the embedded default) and synthetic tensors.

digits: 1,797 8x8 grey images of 10 digits, scaled to [0, 1], with a fixed stratified
80/20 train/test split (``random_state=0``), identical on every rank and every run.
"""

from __future__ import annotations

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
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, stratify=y, random_state=0)
    return TensorData("digits", torch.from_numpy(xtr), torch.from_numpy(ytr),
                      torch.from_numpy(xte), torch.from_numpy(yte), classes=10)


def synthetic(samples: int = 4096, shape: tuple[int, ...] = (1, 8, 8), classes: int = 10,
              seed: int = 0) -> TensorData:
    """Random inputs whose label is a fixed random linear function of them (learnable)."""
    if samples < 2:
        raise ValueError(f"synthetic samples must be >= 2, got {samples}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, *shape, generator=g)
    w = torch.randn(int(np.prod(shape)), classes, generator=g)
    y = (x.reshape(samples, -1) @ w).argmax(dim=1)
    cut = max(1, samples // 5)
    return TensorData("synthetic", x[cut:], y[cut:], x[:cut], y[:cut], classes)


DATASETS = {"digits": digits, "synthetic": synthetic}


def load_tensor_data(name: str) -> TensorData:
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; choose one of: {', '.join(DATASETS)}, "
                         "or pass --data DIR for an ImageFolder")
    return DATASETS[name]()
