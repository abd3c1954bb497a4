"""``--dataset templates``: a generated 10-class task, no download, the same on every rank.

    mpiexec -n 8 gossipgrad train --dataset templates

Ten smooth random 16 x 16 class templates; every sample is its class's template circularly
shifted by up to ``SHIFT`` pixels in each direction, scaled by a random amplitude and
buried in Gaussian noise. The shifts make it hard for a linear model (one weight per pixel
cannot follow a template that moves) while a small MLP learns it well: with the seed below,
a logistic regression reaches about 0.56 test accuracy and the 2-hidden-layer MLP about
0.89 (``python -m lab templates-check``; chance is 0.10).

Every sample is drawn once from one fixed seed: the first ``TEST`` samples are the test
split, the rest the training split, so the two are disjoint by construction. Generation is
pure numpy and takes well under a second.
"""

from __future__ import annotations

import numpy as np

SIDE = 16
"""Height and width of a sample (one channel)."""
CLASSES = 10
SAMPLES = 10_000
"""Samples generated; the first :data:`TEST` are the test split."""
TEST = 2_000
SHIFT = 3
"""Largest circular shift, in pixels, along each axis."""
SMOOTH = 3
"""Templates keep spatial frequencies up to SMOOTH / SIDE cycles per pixel."""
AMPLITUDE = (0.5, 2.0)
"""A sample's template is multiplied by a uniform draw from this range."""
NOISE = 2.0
"""Standard deviation of the added noise, relative to a template's unit standard deviation."""
SCALE = 0.3
"""Everything is finally multiplied by this, so inputs are of order 1 (the default --lr)."""
SEED = 20180616


def class_templates(rng: np.random.Generator) -> np.ndarray:
    """``CLASSES`` low-pass filtered noise images, each of zero mean and unit std."""
    freq = np.abs(np.fft.fftfreq(SIDE)) <= SMOOTH / SIDE
    keep = freq[:, None] & freq[None, :]
    noise = rng.standard_normal((CLASSES, SIDE, SIDE))
    smooth = np.real(np.fft.ifft2(np.fft.fft2(noise) * keep))
    smooth -= smooth.mean(axis=(1, 2), keepdims=True)
    return smooth / smooth.std(axis=(1, 2), keepdims=True)


def generate(samples: int = SAMPLES, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``x`` float32 of shape (samples, 1, SIDE, SIDE), ``y`` int64 labels with
    every class equally often (to within one). Deterministic for a given ``seed``."""
    rng = np.random.default_rng(seed)
    templates = class_templates(rng)
    y = rng.permutation(np.arange(samples) % CLASSES)
    dy = rng.integers(-SHIFT, SHIFT + 1, samples)
    dx = rng.integers(-SHIFT, SHIFT + 1, samples)
    amplitude = rng.uniform(*AMPLITUDE, samples)
    x = np.empty((samples, SIDE, SIDE))
    for sy in range(-SHIFT, SHIFT + 1):  # one roll per shift, not per sample
        for sx in range(-SHIFT, SHIFT + 1):
            idx = np.flatnonzero((dy == sy) & (dx == sx))
            x[idx] = np.roll(templates[y[idx]], (sy, sx), axis=(1, 2))
    x *= amplitude[:, None, None]
    x += NOISE * rng.standard_normal(x.shape)
    x *= SCALE
    return x.reshape(samples, 1, SIDE, SIDE).astype(np.float32), y.astype(np.int64)


def splits(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(train_x, train_y, test_x, test_y)``: the last ``SAMPLES - TEST`` samples train,
    the first ``TEST`` test."""
    x, y = generate(SAMPLES, seed)
    return x[TEST:], y[TEST:], x[:TEST], y[:TEST]
