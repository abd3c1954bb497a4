"""In-step calibration: scale the profile and the exchange model to what a training step
measures on this host, from runs taken *before* (and apart from) the ones being predicted.

Two measured gaps motivate it (docs/planner.md, "Contention term"): the profile's
``F + B + O`` runs faster than the compute-only training loop (hooks, the bucket views, the
other ranks computing on the same cores), and a blocking exchange inside a step costs more
than the ping-pong fit says (the average's arithmetic, polling, the peer's jitter). Both are
measured directly:

- ``compute_factor = measured compute-only step / (F + B + O)``: every phase and every
  bucket's ready time is multiplied by it (:func:`scale_profile`);
- ``exchange_factor = (measured blocking step - measured compute-only step) / S``, per
  strategy, ``S`` = the model's summed bucket costs at the calibration buckets: the
  strategy's bucket costs are multiplied by it (:func:`scale_exchange`).

Pure: no MPI, no torch.

    >>> fit_exchange_factor(blocking_s=0.012, compute_s=0.010, predicted_exchange_s=0.001)
    2.0
"""

from __future__ import annotations

import math
from dataclasses import replace

from gossipgrad.plan.formats import Bucket, Profile
from gossipgrad.plan.model import CommModel, Strategy, parse_strategy

#: The range an exchange factor is clamped to: a blocking step measured no slower than the
#: compute-only one (noise) must not make communication free, nor a stall make it 100x.
FACTOR_RANGE = (0.25, 50.0)


def _positive(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


def fit_compute_factor(measured_local_s: float, profile: Profile) -> float:
    """``measured compute-only step / profile's F + B + O``."""
    _positive("measured_local_s", measured_local_s)
    _positive("profile local step", profile.local_step_s)
    return measured_local_s / profile.local_step_s


def fit_exchange_factor(blocking_s: float, compute_s: float, predicted_exchange_s: float) -> float:
    """``(blocking - compute) / predicted_exchange``, clamped to :data:`FACTOR_RANGE`."""
    for name, v in (("blocking_s", blocking_s), ("compute_s", compute_s),
                    ("predicted_exchange_s", predicted_exchange_s)):
        _positive(name, v)
    lo, hi = FACTOR_RANGE
    return min(hi, max(lo, (blocking_s - compute_s) / predicted_exchange_s))


def scale_profile(profile: Profile, factor: float) -> Profile:
    """The profile with forward, backward, optimizer and every ready time times ``factor``."""
    _positive("factor", factor)
    return replace(
        profile,
        forward_s=profile.forward_s * factor,
        backward_s=profile.backward_s * factor,
        optimizer_s=profile.optimizer_s * factor,
        buckets=tuple(Bucket(b.index, b.bytes, b.ready_s * factor) for b in profile.buckets),
    )


def scale_exchange(model: CommModel, strategy: Strategy | str, factor: float) -> CommModel:
    """``model`` with ``strategy``'s bucket costs times ``factor`` (gossip: ``gossip_factor``;
    allreduce and horovod: both ring factors). Local is returned unchanged."""
    _positive("factor", factor)
    s = parse_strategy(strategy)
    if s is Strategy.GOSSIP:
        return replace(model, gossip_factor=model.gossip_factor * factor)
    if s is Strategy.LOCAL:
        return model
    return replace(
        model,
        allreduce_latency_factor=model.allreduce_latency_factor * factor,
        allreduce_bandwidth_factor=model.allreduce_bandwidth_factor * factor,
    )
