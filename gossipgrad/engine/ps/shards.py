"""Who serves which bucket under ``--strategy ps``: bucket-aligned shards, balanced by bytes.

Every bucket is owned by exactly one rank; its owner keeps the bucket's master copy and its
optimizer state. Pure functions of the bucket sizes and ``size``: every rank computes the
same assignment without a message (the trainer's start-up check compares the layout).

    >>> owners = assign_owners([5672, 65536, 512, 32768], 4)
    >>> owners
    [2, 0, 3, 1]
    >>> sent = bytes_sent_by_rank([5672, 65536, 512, 32768], owners, 4)
    >>> sent, sum(sent) / 4 == 2 * 3 / 4 * (5672 + 65536 + 512 + 32768)
    ([235560, 170024, 115832, 105512], True)
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gossipgrad.choices import spell

__all__ = [
    "MAX_PARTS",
    "PUSH_POOL_BYTES",
    "assign_owners",
    "bytes_sent_by_rank",
    "check_parts",
    "ps_bucket_cap",
    "push_pool",
]


def assign_owners(nbytes: Sequence[int], size: int) -> list[int]:
    """The owner of each bucket: largest bucket first to the least loaded rank (ties: the
    lower bucket index first, the lower rank). Deterministic; with at least ``size``
    buckets every rank owns one.

        >>> assign_owners([10, 10, 10], 2), assign_owners([4], 3)
        ([0, 1, 0], [0])
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    # a heap of (load, rank): its top is the least loaded rank, the lower one on ties, in
    # O(log size) a bucket (the planner prices thousands of ranks and buckets)
    ranks = [(0, r) for r in range(size)]  # sorted: a heap already
    owners = [0] * len(nbytes)
    for b in sorted(range(len(nbytes)), key=lambda i: (-nbytes[i], i)):
        load, r = ranks[0]
        owners[b] = r
        heapq.heapreplace(ranks, (load + nbytes[b], r))
    return owners


# The most bytes of push receive buffers a ps owner holds per owned bucket and slot; a
# bucket whose pushes need more is received in batches (the engine's ShardServer).
PUSH_POOL_BYTES = 256 << 20


def push_pool(nbytes: int, size: int, pool_bytes: int = PUSH_POOL_BYTES) -> int:
    """How many pushes of a bucket of ``nbytes`` an owner receives at once (its pool).

    >>> push_pool(1 << 20, 8), push_pool(411 << 20, 8), push_pool(1 << 20, 1)
    (7, 1, 1)
    """
    return max(1, min(size - 1, pool_bytes // max(1, nbytes)))


def ps_bucket_cap(model_bytes: int, size: int, cap_bytes: int) -> int:
    """The bucket cap ps uses: ``cap_bytes`` (``--bucket-mb``), but at most 1/size of the
    model, so that there are at least ``size`` buckets to share out when the parameters
    are small enough (a parameter larger than the cap still gets a bucket of its own).

        >>> ps_bucket_cap(100, 4, 1 << 20), ps_bucket_cap(100, 4, 10), ps_bucket_cap(100, 1, 60)
        (25, 10, 60)
    """
    if size < 1 or model_bytes < 1 or cap_bytes < 1:
        raise ValueError(
            f"need size, model_bytes and cap_bytes >= 1, got {size}, {model_bytes}, {cap_bytes}"
        )
    return max(1, min(cap_bytes, -(-model_bytes // size)))


MAX_PARTS = 16_384
"""The most parts a parameter server splits its large parameters into: each part is a
message a step, pushed and pulled (and a row the planner prices); past this many, a step
is mostly messages."""


def check_parts(nbytes: Sequence[int], cap_bytes: int, size: int, model_bytes: int) -> None:
    """ValueError unless splitting each bucket of ``nbytes`` larger than ``cap_bytes``
    (:func:`ps_bucket_cap`'s, at ``size`` ranks) into parts of at most the cap makes at
    most :data:`MAX_PARTS` parts; the message says what to change.

        >>> check_parts([1000, 10], 100, 2, 1010)  # 10 parts: fine
        >>> try:
        ...     check_parts([10**9], 1, 2, 10**9)
        ... except ValueError as err:
        ...     print(str(err)[:59])
        ps at 2 ranks would split the parameters into 1,000,000,000
    """
    large = [n for n in nbytes if n > cap_bytes]
    parts = sum(-(-n // cap_bytes) for n in large)
    if parts <= MAX_PARTS:
        return
    said = (
        f"ps at {size} ranks would split the parameters into {parts:,} parts of at most "
        f"{cap_bytes:,} bytes (each a message a step); at most {MAX_PARTS:,}"
    )
    share = -(-model_bytes // size)
    if cap_bytes >= share:  # the server's share sets the parts: more ranks, more parts
        raise ValueError(f"{said}: a rank serves {share:,} bytes of this model; use fewer ranks")
    need = -(-sum(large) // max(1, MAX_PARTS - len(large))) / 2**20
    raise ValueError(f"{said}: use {spell('--bucket-mb')} {need:.3g} or more")


def bytes_sent_by_rank(nbytes: Sequence[int], owners: Sequence[int], size: int) -> list[int]:
    """Bytes each rank sends per step: the gradient of every bucket it does not own (to the
    owner) plus, for every bucket it owns, the parameters to the ``size - 1`` others. Their
    mean over ranks is ring allreduce's ``2 (size - 1) / size`` of the model, whatever the
    assignment."""
    sent = [0] * size
    if size == 1:
        return sent
    for nb, owner in zip(nbytes, owners, strict=True):
        for r in range(size):
            sent[r] += (size - 1) * nb if r == owner else nb
    return sent
