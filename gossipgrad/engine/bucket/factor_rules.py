"""Bytes of a Linear layer's weight gradient in its two forms, and the choice between them:
the rule the runtime follows (``engine/bucket/factors.py``) and the planner prices. PURE.

A Linear layer ``y = x W^T + b`` with ``W`` of shape ``M x N`` (out x in) seen by ``K``
rows of input in one step (batch x positions x backward passes) has the weight gradient
``G = dY^T X``, with ``dY`` (``K x M``) the output gradients and ``X`` (``K x N``) the
inputs: its *sufficient factors* (Xie et al., "Distributed Machine Learning via Sufficient
Factor Broadcasting", 2015; Poseidon's HybComm, Zhang et al. 2017). Sending the factors
costs ``K (M + N)`` numbers instead of ``M N``; the receiver rebuilds ``G`` with one matrix
product per sender.

Bytes one rank sends per step (``s`` = bytes per number, ``p`` = size):

==========================  =======================  ===============================
strategy                    matrix                   factors
==========================  =======================  ===============================
gossip (``--mix grad``)     ``M N s`` (to the peer)  ``K (M + N) s`` (to the peer)
allreduce (ring)            ``2 (p-1)/p M N s``      ``(p-1) K (M + N) s`` (all-gather)
ps                          ``2 (p-1)/p M N s``      ``(p-1) K (M + N) s`` (all-gather)
==========================  =======================  ===============================

An all-gather (ring or recursive doubling) makes every rank send the ``p - 1`` blocks of
the others once: ``(p-1) K (M + N) s``; every rank then holds ``p K (M + N)`` numbers. The
rebuild costs ``2 K M N`` floating-point operations per sender (gossip: 1 sender, the
peer; all-gather: ``p``, as one product of the concatenated factors).

    >>> d = decide("auto", "allreduce", size=8, rows=16, out_features=4096,
    ...            in_features=25088)
    >>> d.form, round(d.factor_bytes / d.matrix_bytes, 4)
    ('factors', 0.0182)
    >>> decide("auto", "gossip", size=2, rows=4096, out_features=10, in_features=10).form
    'matrix'
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass
from typing import Any

from gossipgrad.options import SufficientFactors, choice
from gossipgrad.registry import STRATEGIES


class Form(enum.StrEnum):
    """How a layer's weight gradient travels."""

    MATRIX = "matrix"  # the M x N gradient itself
    FACTORS = "factors"  # dY (K x M) and X (K x N); the receiver multiplies them


class Pattern(enum.StrEnum):
    """How a strategy moves factors."""

    PEER = "peer"  # to this step's peer, from its source (gossip)
    ALLGATHER = "allgather"  # every rank's to every rank (allreduce; a parameter server too)

    @property
    def matrix_shape(self) -> str:
        """The exchange shape of a layer decided "matrix" (it goes as a bucket): to the
        peer, or averaged by an allreduce (ps too: as many bytes as a push and a pull)."""
        return "peer" if self is Pattern.PEER else "ring"


def pattern(strategy: str) -> Pattern:
    """How ``strategy`` exchanges factors (its spec's ``factor_pattern``); ValueError for
    one that cannot.

    >>> pattern("gossip"), pattern("allreduce"), pattern("ps")
    (<Pattern.PEER: 'peer'>, <Pattern.ALLGATHER: 'allgather'>, <Pattern.ALLGATHER: 'allgather'>)
    """
    spec = STRATEGIES.get(strategy)
    if spec.factor_pattern is None:
        raise ValueError(f"--strategy {spec.name} does not exchange sufficient factors")
    return Pattern(spec.factor_pattern)


def _check(size: int, rows: int, out_features: int, in_features: int, itemsize: int) -> None:
    for name, value, low in (
        ("size", size, 1),
        ("rows", rows, 0),
        ("out_features", out_features, 1),
        ("in_features", in_features, 1),
        ("itemsize", itemsize, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def matrix_bytes(
    strategy: str, size: int, out_features: int, in_features: int, itemsize: int = 4
) -> float:
    """Bytes one rank sends per step for the ``M x N`` gradient as a matrix.

    >>> matrix_bytes("gossip", 4, 3, 5), matrix_bytes("allreduce", 4, 3, 5)
    (60.0, 90.0)
    """
    _check(size, 0, out_features, in_features, itemsize)
    pattern(strategy)
    return STRATEGIES.get(strategy).bytes_per_step(out_features * in_features * itemsize, size)


def factor_bytes(
    strategy: str,
    size: int,
    rows: int,
    out_features: int,
    in_features: int,
    itemsize: int = 4,
) -> float:
    """Bytes one rank sends per step for ``rows`` (K) rows of factors.

    >>> factor_bytes("gossip", 4, 2, 3, 5), factor_bytes("allreduce", 4, 2, 3, 5)
    (64.0, 192.0)
    """
    _check(size, rows, out_features, in_features, itemsize)
    block = float(rows * (out_features + in_features) * itemsize)
    if size == 1:
        return 0.0
    return block if pattern(strategy) is Pattern.PEER else (size - 1) * block


def rebuild_flops(
    strategy: str, size: int, rows: int, out_features: int, in_features: int
) -> float:
    """Floating-point operations of the receiver's rebuild per step (0 for the matrix).

    >>> rebuild_flops("gossip", 4, 2, 3, 5), rebuild_flops("allreduce", 4, 2, 3, 5)
    (60.0, 240.0)
    """
    _check(size, rows, out_features, in_features, 1)
    senders = 0 if size == 1 else 1 if pattern(strategy) is Pattern.PEER else size
    return 2.0 * senders * rows * out_features * in_features


@dataclass(frozen=True)
class Decision:
    """One layer's choice and the bytes of both forms (per rank per step)."""

    form: str
    rows: int
    out_features: int
    in_features: int
    matrix_bytes: float
    factor_bytes: float
    rebuild_flops: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def decide(
    mode: SufficientFactors | str,
    strategy: str,
    size: int,
    rows: int,
    out_features: int,
    in_features: int,
    itemsize: int = 4,
) -> Decision:
    """The form of one layer's gradient: ``off`` the matrix; ``on`` the factors whenever
    there are rows to send; ``auto`` the factors only when they are strictly fewer bytes.
    A layer with no rows (never run forward on any rank) always goes as the matrix: its
    gradient, if any, did not come through the captured factors.

        >>> decide("on", "gossip", 2, 4096, 10, 10).form
        'factors'
        >>> decide("on", "gossip", 2, 0, 10, 10).form
        'matrix'
    """
    mode = choice(SufficientFactors, mode, "--sufficient-factors")
    mat = matrix_bytes(strategy, size, out_features, in_features, itemsize)
    fac = factor_bytes(strategy, size, rows, out_features, in_features, itemsize)
    if mode is SufficientFactors.OFF or rows == 0:
        form = Form.MATRIX
    elif mode is SufficientFactors.ON:
        form = Form.FACTORS
    else:
        form = Form.FACTORS if fac < mat else Form.MATRIX
    return Decision(
        form.value,
        rows,
        out_features,
        in_features,
        mat,
        fac,
        rebuild_flops(strategy, size, rows, out_features, in_features)
        if form is Form.FACTORS
        else 0.0,
    )


def crossover_rows(strategy: str, size: int, out_features: int, in_features: int) -> int:
    """The largest K for which ``auto`` sends factors (0: never at this size).

    >>> crossover_rows("gossip", 2, 4096, 4096), crossover_rows("allreduce", 8, 4096, 4096)
    (2047, 511)
    """
    _check(size, 0, out_features, in_features, 1)
    if size == 1:
        return 0
    per_row = factor_bytes(strategy, size, 1, out_features, in_features, 1)
    mat = matrix_bytes(strategy, size, out_features, in_features, 1)
    k = int(mat // per_row)
    return k - 1 if k * per_row >= mat else k
