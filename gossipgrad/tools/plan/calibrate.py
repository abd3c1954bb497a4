"""In-step calibration: scale the profile and the exchange model to what a training step
measures on this host, from runs taken *before* (and apart from) the ones being predicted.

Two measured gaps motivate it (lab/records/planner.md, "Contention term"): the
profile's ``F + B + O`` runs faster than the compute-only training loop (hooks, the bucket
views, the other ranks computing on the same cores), and a blocking exchange inside a step
costs more than the ping-pong fit says (the average's arithmetic, polling, the peer's
jitter). Both are measured directly:

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
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gossipgrad.tools.plan.formats import Bucket, Profile
from gossipgrad.tools.plan.host import fit_overlap, fit_stale
from gossipgrad.tools.plan.model import CommModel, shape_of

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
    for name, v in (
        ("blocking_s", blocking_s),
        ("compute_s", compute_s),
        ("predicted_exchange_s", predicted_exchange_s),
    ):
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


def scale_exchange(model: CommModel, strategy: str, factor: float) -> CommModel:
    """``model`` with ``strategy``'s bucket costs times ``factor`` (gossip: ``gossip_factor``;
    allreduce and horovod: both ring factors, and a queued bucket's). Local is returned
    unchanged."""
    _positive("factor", factor)
    scaled = shape_of(strategy).exchange_factor
    if scaled == "gossip":
        return replace(model, gossip_factor=model.gossip_factor * factor)
    if scaled is None:
        return model
    queued = (model.queued_latency_factor, model.queued_bandwidth_factor)
    return replace(
        model,
        allreduce_latency_factor=model.allreduce_latency_factor * factor,
        allreduce_bandwidth_factor=model.allreduce_bandwidth_factor * factor,
        queued_latency_factor=None if queued[0] is None else queued[0] * factor,
        queued_bandwidth_factor=None if queued[1] is None else queued[1] * factor,
    )


def fit_in_step(
    runs: Sequence[Mapping[str, Any]],
    latest: Sequence[Mapping[str, Any]],
    profile: Profile,
    exchange_s: Mapping[str, float],
) -> dict[str, Any]:
    """Every factor of the in-step calibration from calibration runs (each a mapping with
    ``strategy`` and the step times ``local_s``, ``blocking_s``, ``s0_s``, ``s1_s`` of one
    round at the same buckets, ``profile``'s). ``exchange_s[strategy]`` is the model's
    summed bucket costs ``S`` of those buckets.

    - ``compute_factor``: median of ``fit_compute_factor`` over ``latest`` only, the rounds
      taken just before the runs to be predicted, so that it follows a drift of the host;
    - ``exchange_factor[strategy]``, ``overlap_s`` (``fit_overlap(blocking, s0)``),
      ``stale_s_per_byte_by_strategy[strategy]`` (``fit_stale(s0, s1, G, hidden_max_s=
      blocking - local)``: staleness 1 may hide up to the round's measured exchange) and
      ``stale_s_per_byte`` (the same pooled over strategies): medians over all ``runs``
      (each a difference of two noisy steps, which drift together).

    >>> p = Profile("m", 8, "cpu", 0.002, 0.006, 0.002, 1000, (Bucket(0, 1000, 0.006),))
    >>> r = {"strategy": "gossip", "local_s": 0.02, "blocking_s": 0.03, "s0_s": 0.032,
    ...      "s1_s": 0.033}
    >>> f = fit_in_step([r], [r], p, {"gossip": 0.005})
    >>> f["compute_factor"], round(f["exchange_factor"]["gossip"], 6), round(f["overlap_s"], 6)
    (2.0, 2.0, 0.002)
    """
    if not runs or not latest:
        raise ValueError("in-step calibration needs at least one round of runs")

    def stale(r: Mapping[str, Any]) -> float:
        hidden_max = max(0.0, r["blocking_s"] - r["local_s"])
        return fit_stale(r["s0_s"], r["s1_s"], profile.grad_bytes, hidden_max_s=hidden_max)

    strategies = list(dict.fromkeys(r["strategy"] for r in runs))
    missing = [s for s in strategies if s not in exchange_s]
    if missing:
        raise ValueError(f"no predicted exchange time for strategies {missing}")
    return {
        "compute_factor": statistics.median(
            fit_compute_factor(r["local_s"], profile) for r in latest
        ),
        "exchange_factor": {
            s: statistics.median(
                fit_exchange_factor(r["blocking_s"], r["local_s"], exchange_s[s])
                for r in runs
                if r["strategy"] == s
            )
            for s in strategies
        },
        "overlap_s": statistics.median(fit_overlap(r["blocking_s"], r["s0_s"]) for r in runs),
        "stale_s_per_byte": statistics.median(stale(r) for r in runs),
        "stale_s_per_byte_by_strategy": {
            s: statistics.median(stale(r) for r in runs if r["strategy"] == s) for s in strategies
        },
    }
