"""Sufficient factors in the step-time model: the runtime's rule
(:mod:`gossipgrad.engine.bucket.factor_rules`) priced on the planner's network model."""

from __future__ import annotations

from gossipgrad.engine.bucket.factor_rules import (  # noqa: F401 - re-exported for the planner
    Decision,
    Form,
    Pattern,
    crossover_rows,
    decide,
    factor_bytes,
    matrix_bytes,
    pattern,
    rebuild_flops,
)
from gossipgrad.options import SufficientFactors
from gossipgrad.registry import STRATEGIES
from gossipgrad.tools.plan.formats import Profile
from gossipgrad.tools.plan.model import CommModel


def allgather_s(block: float, size: int, model: CommModel) -> float:
    """Seconds of a ring all-gather of one ``block``-byte block per rank: ``p - 1`` steps of
    one block, not below all ranks' ``p (p-1)`` blocks through the fabric's shared
    bottleneck."""
    p, f = size, model.fabric
    if p < 2:
        return 0.0
    wire = (p - 1) * block * max(model.beta_s_per_byte, f.shared_beta(p))
    return (p - 1) * model.alpha_s + wire + model.host_s_per_byte * (p - 1) * block


def factor_transfers(
    profile: Profile,
    model: CommModel,
    strategy: str,
    size: int,
    mode: SufficientFactors | str,
    itemsize: int = 4,
) -> tuple[Profile, list[tuple[float, float]], float]:
    """One configuration's sufficient factors in the step-time model: ``(the profile
    without the buckets of the weights sent as factors, their transfers as (ready_s,
    cost_s) for :func:`gossipgrad.tools.plan.model.step_time`'s ``extra``, the bytes one rank
    sends for them per step)``. Each of ``profile.linear`` is decided as the runtime
    decides it (:func:`decide`); a strategy that cannot send factors, ``off`` or one rank
    leave the profile as it is.

        >>> from gossipgrad.tools.plan.formats import Bucket, LinearLayer
        >>> p = Profile("m", 8, "cpu", 0.1, 0.2, 0.0, 4000 * 4, (Bucket(0, 4000 * 4, 0.1),),
        ...             linear=(LinearLayer(0, 40, 100, 8),))
        >>> rest, extra, sent = factor_transfers(p, CommModel(0.0, 1e-9), "gossip", 2, "auto")
        >>> rest.buckets, [(r, round(c, 9)) for r, c in extra], sent
        ((), [(0.1, 4.48e-06)], 4480.0)
    """
    spec = STRATEGIES.get(strategy)
    if spec.factor_pattern is None or size < 2 or not profile.linear:
        return profile, [], 0.0
    by_index = {b.index: b for b in profile.buckets}
    moved, extra, sent = set(), [], 0.0
    for layer in profile.linear:
        d = decide(
            mode, strategy, size, layer.rows, layer.out_features, layer.in_features, itemsize
        )
        if d.form != Form.FACTORS.value:
            continue
        bucket = by_index[layer.bucket]
        block = layer.rows * (layer.out_features + layer.in_features) * itemsize
        if pattern(strategy) is Pattern.PEER:
            cost = model.bucket_s(strategy, block, size)
        else:
            cost = allgather_s(block, size, model)
        moved.add(layer.bucket)
        extra.append((bucket.ready_s, cost))
        sent += d.factor_bytes
    rest = tuple(b for b in profile.buckets if b.index not in moved)
    return profile.with_buckets(rest), extra, sent
