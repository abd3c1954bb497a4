"""A count sketch of a model's parameters: the consensus distance from k floats per rank.

The exact consensus distance, mean over ranks of ||x_i - x̄||² / ||x̄||², needs the mean
parameter vector x̄: a full allreduce of the model, as expensive as a global average. A
count sketch S maps every parameter coordinate j to one of ``bins`` bins h(j) with a random
sign s(j) (the same map on every rank, from a shared seed); S x is linear, so
S x̄ = mean_i S x_i, and E ||S v||² = ||v||² over the random map. One allreduce of
``[S x_i, ||S x_i||²]`` (``bins + 1`` float64) therefore gives every rank

    mean_i ||S x_i - S x̄||² = mean_i ||S x_i||² - ||S x̄||²   and   ||S x̄||²,

whose ratio estimates the consensus distance (:func:`estimate_distance`; relative error of
order sqrt(2 / bins) for a diffuse drift).

The map is stored compactly. Consecutive small tensors are concatenated into groups of at
most ``GROUP`` coordinates (a larger tensor is a group of its own); a group of n coordinates
is viewed as a matrix of ``w <= BLOCK`` rows and ``ceil(n / w)`` columns (zero-padded). One
random pattern (h, s) of ``BLOCK`` entries gives row j its bin h(j) and sign s(j), the same
in every column of every group, and every column has its own random rotation of the bins
and its own random sign. Two coordinates in one column have independent bins and signs; two
in different columns share a bin with probability 1 / bins and have independent signs; so
the estimate stays unbiased, and the map costs 16 bytes x ``BLOCK`` plus 12 bytes per
column of memory however large the model is. Computing it reads every parameter once (one
``index_add_`` of contiguous rows per group: about the work of the optimizer's update, in a
few operations per group), on the parameters' device, and returns ``bins`` float64 on the
host.
"""

from __future__ import annotations

import numpy as np
import torch

BLOCK = 1 << 12
"""Length of the shared pattern: the most rows a tensor is folded into."""

GROUP = 1 << 16
"""Consecutive tensors are sketched together while their total stays within this."""

DEFAULT_BINS = 256
"""Bins of the monitor's sketch: 2 KiB per allreduce; relative error about 9%."""


class CountSketch:
    """The count sketch of a fixed list of tensors (shapes fixed at construction).

    Args:
        tensors: the tensors to sketch, in an order identical on every rank; only their
            sizes are read here.
        bins: the sketch length k (>= 1).
        seed: the shared seed; every rank must pass the same one.

        >>> import torch
        >>> t = [torch.ones(3, 4), torch.ones(5)]
        >>> sk = CountSketch(t, bins=8, seed=0)
        >>> v = sk.sketch(t)
        >>> v.shape, bool(np.isclose(v.sum(), sk.sketch([2 * x for x in t]).sum() / 2))
        ((8,), True)
    """

    def __init__(
        self, tensors: list[torch.Tensor], bins: int = DEFAULT_BINS, seed: int = 0
    ) -> None:
        if bins < 1:
            raise ValueError(f"a sketch needs >= 1 bins, got {bins}")
        self.bins = bins
        self.sizes = [t.numel() for t in tensors]
        state = np.random.SeedSequence([seed, 0x5C]).generate_state(1, np.uint64)[0]
        gen = torch.Generator().manual_seed(int(state >> np.uint64(1)))
        self._bin = torch.randint(0, bins, (BLOCK,), generator=gen)
        self._sign = torch.randint(0, 2, (BLOCK,), generator=gen).float().mul_(2).sub_(1)
        self.groups = group_tensors(self.sizes)
        self.shapes = [fold(sum(self.sizes[i] for i in g)) for g in self.groups]
        columns = [c for _, c in self.shapes]
        self._rot = torch.randint(0, bins, (sum(columns),), generator=gen)
        self._flip = torch.randint(0, 2, (sum(columns),), generator=gen).float().mul_(2).sub_(1)
        self._cache: dict[torch.device, tuple[torch.Tensor, ...]] = {}

    def _pattern(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device not in self._cache:
            k = self.bins
            target = (torch.arange(k)[:, None] + self._rot[None, :]) % k  # (bins, columns)
            self._cache[device] = tuple(
                t.to(device) for t in (self._bin, self._sign, target.reshape(-1), self._flip)
            )
        return self._cache[device]

    def sketch(self, tensors: list[torch.Tensor]) -> np.ndarray:
        """S x for the concatenation x of ``tensors`` (same sizes as at construction; read
        only): ``bins`` float64. Small tensors are sketched together (one concatenation
        per group of at most ``GROUP`` coordinates), so a model of many small tensors costs
        a few operations, not a few per tensor."""
        if [t.numel() for t in tensors] != self.sizes:
            raise ValueError("the tensors changed size since the sketch was built")
        if not tensors or not sum(self.sizes):
            return np.zeros(self.bins)
        device = tensors[0].device
        h, s, target, flip = self._pattern(device)
        columns = []
        for group, (rows, cols) in zip(self.groups, self.shapes, strict=True):
            parts = [tensors[i].detach().reshape(-1).to(device, torch.float32) for i in group]
            v = parts[0] if len(parts) == 1 else torch.cat(parts)
            if rows * cols > v.numel():
                v = torch.nn.functional.pad(v, (0, rows * cols - v.numel()))
            per_column = torch.zeros(self.bins, cols, dtype=torch.float32, device=device)
            columns.append(per_column.index_add_(0, h[:rows], v.view(rows, cols) * s[:rows, None]))
        # every column rotated by its own draw and signed, then all summed (float64)
        signed = (torch.cat(columns, dim=1) * flip[None, :]).double().reshape(-1)
        out = torch.zeros(self.bins, dtype=torch.float64, device=device)
        return out.index_add_(0, target, signed).cpu().numpy()


def group_tensors(sizes: list[int]) -> list[list[int]]:
    """Consecutive tensor indices grouped so that a group holds at most ``GROUP``
    coordinates, or is one larger tensor alone (empty tensors join any group).

        >>> group_tensors([10, 20, GROUP, 5, 5])
        [[0, 1], [2], [3, 4]]
    """
    groups: list[list[int]] = []
    total = GROUP + 1
    for i, n in enumerate(sizes):
        if total + n > GROUP:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n
    return groups


def fold(n: int) -> tuple[int, int]:
    """``(rows, columns)`` of the matrix a tensor of ``n`` coordinates is folded into: at
    most ``BLOCK`` rows, as few columns as that allows, and fewer than ``columns`` padded
    zeros.

        >>> fold(10), fold(BLOCK * 3), fold(BLOCK * 3 + 1)
        ((10, 1), (4096, 3), (3073, 4))
    """
    cols = max(1, -(-n // BLOCK))
    return max(1, -(-n // cols)), cols


def sketch_message(sketch: np.ndarray) -> np.ndarray:
    """What one rank contributes to the allreduce: ``[S x_i, ||S x_i||²]`` (float64)."""
    return np.concatenate([sketch, [float(sketch @ sketch)]])


def estimate_distance(summed: np.ndarray, size: int) -> float:
    """The consensus distance estimated from the SUM over ``size`` ranks of
    :func:`sketch_message`; the same convention as the exact one (0 for one rank; the
    absolute distance when the mean is 0). A pure function of its arguments, so ranks
    holding the same allreduce result take the same decision."""
    if size <= 1:
        return 0.0
    mean = summed[:-1] / size
    norm = float(mean @ mean)
    spread = max(0.0, float(summed[-1]) / size - norm)
    return spread / norm if norm > 0 else spread
