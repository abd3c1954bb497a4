"""Split a dataset's sample indices into equal shards, one per rank (``--partition``).

Kinds:

- ``iid``: a seeded random permutation, cut into ``size`` chunks;
- ``sorted``: samples sorted by label (ties in seeded random order), cut into contiguous
  chunks, so each rank sees only a few labels (the worst case the shuffle repairs);
- ``dirichlet:ALPHA``: for every class, proportions over ranks drawn from Dir(ALPHA); small
  ALPHA (0.1) is very skewed, large (100) nearly iid. Shards are then balanced to equal
  lengths by moving randomly chosen samples from the largest to the smallest shards.

Every shard has ``len(labels) // size`` samples: the ``len(labels) % size`` left over are
dropped, chosen at random with the seed (at most ``size - 1`` samples). Same labels, size,
kind and seed give the same shards. Example::

    >>> import numpy as np
    >>> shards = partition(np.array([0, 0, 1, 1, 2, 2, 2]), 3, "sorted", seed=0)
    >>> [len(s) for s in shards]
    [2, 2, 2]
"""

from __future__ import annotations

import numpy as np

from gossipgrad.options import parse_partition

__all__ = ["parse_partition", "partition"]


def partition(labels: np.ndarray, size: int, kind: str = "iid", seed: int = 0) -> list[np.ndarray]:
    """Indices into ``labels`` for each of ``size`` ranks; all shards have the same length.

    ``labels`` is a 1-D integer array (not modified). Returns ``size`` int64 arrays of
    ``len(labels) // size`` distinct indices each (order within a shard is not meaningful).
    """
    name, alpha = parse_partition(kind)
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and not np.issubdtype(labels.dtype, np.integer)):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.shape} {labels.dtype}")
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    per = len(labels) // size
    if per == 0:
        raise ValueError(f"{len(labels)} samples cannot give each of {size} ranks a sample")
    rng = np.random.default_rng((seed, 0x5041_5254))  # "PART"
    kept = rng.permutation(len(labels))[: per * size]  # drops len % size at random
    if name == "iid":
        return [s.astype(np.int64) for s in np.split(kept, size)]
    if name == "sorted":
        order = kept[np.argsort(labels[kept], kind="stable")]
        return [s.astype(np.int64) for s in np.split(order, size)]
    return _dirichlet(labels, kept, size, per, alpha, rng)


def _dirichlet(
    labels: np.ndarray,
    kept: np.ndarray,
    size: int,
    per: int,
    alpha: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    shards: list[list[np.ndarray]] = [[] for _ in range(size)]
    for c in np.unique(labels[kept]):
        members = kept[labels[kept] == c]  # already in random order
        share = rng.dirichlet(np.full(size, alpha))
        cuts = np.round(np.cumsum(share)[:-1] * len(members)).astype(int)
        for r, part in enumerate(np.split(members, cuts)):
            shards[r].append(part)
    pieces = [rng.permutation(np.concatenate(s)) if s else np.zeros(0, np.int64) for s in shards]
    surplus = np.concatenate([p[per:] for p in pieces])
    rng.shuffle(surplus)
    out, used = [], 0
    for p in pieces:
        need = per - min(len(p), per)
        out.append(np.concatenate([p[:per], surplus[used : used + need]]).astype(np.int64))
        used += need
    assert used == len(surplus) and all(len(s) == per for s in out)
    return out
