"""The Base-2 graph: one-peer rounds that average any number of ranks exactly. PURE, stdlib.

After Takezawa et al., "Beyond Exponential Graph: Communication-Efficient Topologies for
Decentralized Learning via Finite-time Convergence" (NeurIPS 2023): the one-peer case
(k = 1) of their Base-(k+1) graph, written again here from its construction.

    >>> [len(base2_rounds(n)) for n in (1, 2, 3, 4, 5, 6, 7, 12, 24, 96)]
    [0, 1, 3, 2, 5, 4, 5, 5, 6, 8]

A round is a tuple of pairs ``(a, b, weight)`` over virtual positions ``0..size-1``: ``a``
and ``b`` each keep ``1 - weight`` of their own value and take ``weight`` of the other's;
a position in no pair of the round is idle. The pairs of a round are disjoint, so each
round is a symmetric, doubly stochastic matrix (the mean is kept), and the product of all
rounds is the averaging matrix: after one pass every position holds the exact mean.

Construction. Write ``size = 2**a * m`` with ``m`` odd. Cut the positions into ``2**a``
blocks of ``m``; every block runs the simple Base-2 graph of ``m`` (below) at the same time,
then ``a`` hypercube rounds across the blocks (position ``i`` of every block with position
``i`` of the others, weight 1/2) average the block means. Pass length
``T(m) + a``, with ``T(1) = 0`` and ``T(m) = 2 floor(log2 m) + 1`` for odd ``m > 1``; a
power of two is the plain hypercube.

The simple graph of ``m`` nodes, ``m = n_0 + n_1 + ... + n_{L-1}`` its binary digits
(``n_0 > n_1 > ...``, powers of two), groups ``V_j`` of ``n_j`` consecutive positions and
``N_j = n_j + ... + n_{L-1}`` (so ``n_j > N_{j+1}``), ``p = log2 n_0``:

1. rounds ``0..p-1``: every group runs its own hypercube (repeating its dimensions), so
   group ``j`` holds its mean ``a_j`` on every node;
2. round ``p + j`` (``j < L - 1``): every node of ``V_{j+1} ∪ ... ∪ V_{L-1}`` pairs with a
   distinct node of ``V_j`` with weight ``n_j / N_j``; the rest of ``V_j`` pairs up with
   weight 1/2 (equal values there, so it changes nothing; a leftover node idles). By
   induction a node of group ``l > j`` then holds ``(sum_{i<=j} n_i a_i + N_{j+1} a_l) / m``,
   all of ``V_l`` alike, and after round ``p + L - 2`` the last group holds the mean;
3. from round ``p + j + 1`` on, group ``j`` runs its hypercube again. Nobody outside
   ``V_j`` touches it any more, and the sum of ``V_j`` is then ``n_j`` times the mean (the
   groups after it hold the mean, and earlier groups already had their share), so its
   ``log2 n_j <= p - j`` hypercube rounds leave the mean on every node. The pass ends
   after ``2p + 1`` rounds (group 0's).

Worked example, ``size = 6 = 2 x 3``: blocks {0, 1, 2} and {3, 4, 5}; in block {0, 1, 2},
``V_0 = {0, 1}`` and ``V_1 = {2}``, ``p = 1``::

    round 0: 0-1 (1/2), 3-4 (1/2); 2, 5 idle  -> x0 = x1 = (x0 + x1) / 2
    round 1: 2-0 (2/3), 5-3 (2/3); 1, 4 idle  -> x2 = (x0 + x1 + x2) / 3
    round 2: 0-1 (1/2), 3-4 (1/2); 2, 5 idle  -> the block mean on 0, 1, 2
    round 3: 0-3, 1-4, 2-5 (1/2)              -> the mean of all six everywhere

    >>> base2_rounds(6)[1]
    ((2, 0, 0.6666666666666666), (5, 3, 0.6666666666666666))
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["Pair", "Round", "base2_partners", "base2_rounds"]

Pair = tuple[int, int, float]
Round = tuple[Pair, ...]


@lru_cache(maxsize=128)
def base2_rounds(size: int) -> tuple[Round, ...]:
    """The rounds of one pass over ``size`` positions (empty for ``size`` 1)."""
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    twos = (size & -size).bit_length() - 1  # size = 2**twos * odd
    odd = size >> twos
    blocks = [_simple(list(range(b * odd, (b + 1) * odd))) for b in range(1 << twos)]
    rounds = [[pair for block in parts for pair in block] for parts in zip(*blocks, strict=True)]
    for d in range(twos):
        hop = odd << d
        rounds.append([(v, v + hop, 0.5) for v in range(size) if not (v // odd) >> d & 1])
    return tuple(tuple(r) for r in rounds)


@lru_cache(maxsize=128)
def base2_partners(size: int) -> tuple[tuple[tuple[int, float], ...], ...]:
    """``table[t][v] = (partner, weight)`` for round ``t`` of the pass, ``(v, 0.0)`` when
    position ``v`` idles in that round."""
    table = []
    for rnd in base2_rounds(size):
        row = [(v, 0.0) for v in range(size)]
        for a, b, w in rnd:
            assert row[a][1] == row[b][1] == 0.0, f"size {size}: {a} or {b} paired twice"
            row[a], row[b] = (b, w), (a, w)
        table.append(tuple(row))
    return tuple(table)


def _simple(nodes: list[int]) -> list[list[Pair]]:
    """Rounds that average ``nodes`` exactly: the simple Base-2 graph (module docstring)."""
    groups, start = [], 0
    for bit in reversed(range(len(nodes).bit_length())):
        if len(nodes) >> bit & 1:
            groups.append(nodes[start : start + (1 << bit)])
            start += 1 << bit
    p = len(groups[0]).bit_length() - 1
    if len(groups) == 1:
        return _hypercube(nodes, p)
    period = 2 * p + 1
    rounds: list[list[Pair]] = [[] for _ in range(period)]
    for group in groups:
        _add(rounds, 0, _hypercube(group, p))
    for j, group in enumerate(groups[:-1]):
        rest = [v for later in groups[j + 1 :] for v in later]
        weight = len(group) / (len(group) + len(rest))
        paired, spare = group[: len(rest)], group[len(rest) :]
        rounds[p + j] += [(v, u, weight) for v, u in zip(rest, paired, strict=True)]
        rounds[p + j] += [(spare[i], spare[i + 1], 0.5) for i in range(0, len(spare) - 1, 2)]
        _add(rounds, p + j + 1, _hypercube(group, period - p - j - 1))
    last = p + len(groups) - 1
    _add(rounds, last, _hypercube(groups[-1], period - last))
    return rounds


def _hypercube(nodes: list[int], steps: int) -> list[list[Pair]]:
    """``steps`` hypercube rounds on ``nodes`` (a power of two of them), dimension ``t mod
    log2 len(nodes)`` in round ``t``; one node has no pairs."""
    dims = len(nodes).bit_length() - 1
    if dims == 0:
        return [[] for _ in range(steps)]
    return [
        [(nodes[i], nodes[i | 1 << d], 0.5) for i in range(len(nodes)) if not i >> d & 1]
        for d in (t % dims for t in range(steps))
    ]


def _add(rounds: list[list[Pair]], first: int, more: list[list[Pair]]) -> None:
    """Append the pairs of ``more`` to ``rounds`` from round ``first`` on (in place)."""
    for t, pairs in enumerate(more, start=first):
        rounds[t] += pairs
