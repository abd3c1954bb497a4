"""Held-out prediction: an in-step calibration fitted at one size on one link, frozen, and
the step time of a configuration at another size, host share or link predicted from it.

:class:`FrozenCalibration` keeps the factors of :func:`~gossipgrad.tools.plan.calibrate.fit_in_step`
with where they were measured (size, link, host share, that link's alpha-beta fit) and is
built only from calibration rounds tagged with that size and link: a round from anywhere
else raises. :func:`predict_held_out` is a pure function of (profile, the target link's
model, the frozen calibration, the configuration, size, host, link) and refuses the
calibration's own size and link, whose runs would be in-sample. So a held-out prediction
cannot see a scored run: nothing measured at a held-out size or link enters it.

Transfer rules (fixed before any held-out run; docs/planner.md, "Held-out validation"):

1. **Host share** ``s(h) = max(1, ranks_per_host / cores)``: how many ranks take turns on
   each core. Every calibrated term that is CPU work -- the compute factor, the exchange
   overhead, the per-step overlap cost ``v`` and the staleness-1 cost ``k`` -- is
   multiplied by ``r = s(target) / s(calibration)``.
2. **Exchange = transport + overhead.** The transport is the target link's alpha-beta fit
   in the strategy's formula at the target size; on loopback it is memory copies made by
   the ranks' own CPUs and is multiplied by ``r`` too. The overhead, what a blocking
   exchange inside a step costs beyond the fit (the average's arithmetic, polling, the
   peer's jitter), is ``(exchange_factor - 1)`` times the *calibration* link's transport at
   the target size, times ``r``. On the calibration link this is ``exchange_factor *
   transport * r``; on a slower link the overhead stays a CPU cost, it is not multiplied
   by the wire time.
3. The compute-only step is ``(F + B + O) * compute_factor * r``.

Pure: no MPI, no torch.

    >>> from gossipgrad.tools.plan.formats import Bucket, Profile
    >>> p = Profile("m", 8, "cpu", 0.002, 0.006, 0.002, 1000, (Bucket(0, 1000, 0.006),))
    >>> cal = FrozenCalibration(2, "loopback", HostShare(2, 2), CommModel(1e-4, 0.0), 1.5,
    ...                         {"gossip": 2.0}, 0.0, {"gossip": 0.0})
    >>> round(predict_local_s(p, cal, HostShare(2, 4)), 6)   # 4 ranks on 2 cores: r = 2
    0.03
    >>> st = predict_held_out(p, CommModel(1e-4, 0.0), cal, "gossip", 4, host=HostShare(2, 4),
    ...                       link="loopback", overlap=False)
    >>> round(st.step_s, 6)   # 0.03 compute + 2.0 * 1e-4 * r
    0.0304
"""

# Over 300 lines on purpose: the frozen calibration and every prediction made from it stay in
# one module, so that nothing scored can reach a fit unseen.

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gossipgrad.tools.plan.calibrate import FACTOR_RANGE, fit_in_step, scale_profile
from gossipgrad.tools.plan.formats import Profile
from gossipgrad.tools.plan.host import HostShare
from gossipgrad.tools.plan.model import CommModel, StepTime, parse_strategy, shape_of, step_time

LOOPBACK = "loopback"
"""The link label of ranks on one host talking through shared memory."""


def share(host: HostShare) -> float:
    """Ranks per core where they outnumber the cores, else 1.

    >>> share(HostShare(2, 8)), share(HostShare(2, 2)), share(HostShare(16, 2))
    (4.0, 1.0, 1.0)
    """
    return max(1.0, host.ranks_per_host / host.cores)


@dataclass(frozen=True)
class FrozenCalibration:
    """The in-step calibration of one size on one link, frozen.

    Args:
        size: ranks of the calibration rounds.
        link: their link (``loopback``, ``emulated <rate>``, ``network``).
        host: their host share (cores, ranks on the host; the fitted costs are below).
        link_model: the calibration link's alpha-beta fit (factors 1), the transport the
            exchange factors are relative to.
        compute_factor: measured compute-only step / profile's ``F + B + O``.
        exchange_factor: per strategy, measured blocking exchange / the fit's.
        overlap_s: per overlapped step without a spare core (``v``).
        stale_s_per_byte: per strategy, staleness 1's cost per gradient byte (``k``).
        workload: what was trained (``arch``, ``hidden``, ``batch_size``), so that a
            calibration is not applied to another model.
        rounds: how many calibration rounds were fitted.
    """

    size: int
    link: str
    host: HostShare
    link_model: CommModel
    compute_factor: float
    exchange_factor: Mapping[str, float]
    overlap_s: float
    stale_s_per_byte: Mapping[str, float]
    workload: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 2:
            raise ValueError(f"calibration size must be an integer >= 2, got {self.size!r}")
        if not isinstance(self.link, str) or not self.link:
            raise ValueError(f"calibration link must be a non-empty label, got {self.link!r}")
        _positive("compute_factor", self.compute_factor)
        for s, f in self.exchange_factor.items():
            parse_strategy(s)
            _positive(f"exchange_factor[{s}]", f)
        if not (math.isfinite(self.overlap_s) and self.overlap_s >= 0):
            raise ValueError(f"overlap_s must be a finite number >= 0, got {self.overlap_s!r}")
        for s, k in self.stale_s_per_byte.items():
            if not math.isfinite(k):
                raise ValueError(f"stale_s_per_byte[{s}] must be finite, got {k!r}")

    @classmethod
    def from_rounds(
        cls,
        rounds: Sequence[Mapping[str, Any]],
        *,
        size: int,
        link: str,
        host: HostShare,
        link_model: CommModel,
        profile: Profile,
        exchange_s: Mapping[str, float],
        workload: Mapping[str, Any] | None = None,
    ) -> FrozenCalibration:
        """Fit every round (each tagged ``size`` and ``link``; see
        :func:`~gossipgrad.tools.plan.calibrate.fit_in_step`, the compute factor over all of
        them) and freeze. A round measured at another size or on another link raises
        ``ValueError``: it would carry a held-out run's timing into the calibration."""
        for i, r in enumerate(rounds):
            if (r.get("size"), r.get("link")) != (size, link):
                raise ValueError(
                    f"calibration round {i} was measured at size {r.get('size')!r} on "
                    f"{r.get('link')!r}; a calibration at size {size} on {link!r} takes only "
                    "its own rounds (anything else would leak held-out timings into it)"
                )
        fit = fit_in_step(rounds, rounds, profile, exchange_s)
        return cls(
            size,
            link,
            HostShare(host.cores, host.ranks_per_host),
            replace(
                link_model,
                allreduce_latency_factor=1.0,
                allreduce_bandwidth_factor=1.0,
                gossip_factor=1.0,
            ),
            fit["compute_factor"],
            dict(fit["exchange_factor"]),
            fit["overlap_s"],
            dict(fit["stale_s_per_byte_by_strategy"]),
            dict(workload or {}),
            len(rounds),
        )

    def unfitted(self) -> FrozenCalibration:
        """The same context with nothing fitted to a run (factors 1, no overlap or
        staleness cost): profile, fit and host share alone."""
        return replace(
            self,
            compute_factor=1.0,
            exchange_factor={s: 1.0 for s in self.exchange_factor},
            overlap_s=0.0,
            stale_s_per_byte={s: 0.0 for s in self.stale_s_per_byte},
            rounds=0,
        )

    def to_json(self) -> dict[str, Any]:
        m = self.link_model
        return {
            "size": self.size,
            "link": self.link,
            "host": self.host.to_json(),
            "link_model": {
                "alpha_s": m.alpha_s,
                "beta_s_per_byte": m.beta_s_per_byte,
                "duplex": m.duplex,
            },
            "compute_factor": self.compute_factor,
            "exchange_factor": dict(self.exchange_factor),
            "overlap_s": self.overlap_s,
            "stale_s_per_byte": dict(self.stale_s_per_byte),
            "workload": dict(self.workload),
            "rounds": self.rounds,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FrozenCalibration:
        """Parse :meth:`to_json`'s document; a missing or bad field raises ``ValueError``
        naming it."""
        try:
            m = data["link_model"]
            return cls(
                data["size"],
                data["link"],
                HostShare.from_json(data["host"], "frozen calibration host"),
                CommModel(m["alpha_s"], m["beta_s_per_byte"], m.get("duplex", 1.0)),
                data["compute_factor"],
                dict(data["exchange_factor"]),
                data["overlap_s"],
                dict(data["stale_s_per_byte"]),
                dict(data.get("workload", {})),
                data.get("rounds", 0),
            )
        except KeyError as e:
            raise ValueError(f"frozen calibration: field {e.args[0]!r} is missing") from None
        except (TypeError, AttributeError) as e:
            raise ValueError(f"frozen calibration: malformed ({e})") from None


def _positive(name: str, v: float) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {v!r}")


def share_ratio(cal: FrozenCalibration, host: HostShare) -> float:
    """``r = s(host) / s(calibration host)``: how much more each CPU cost weighs here."""
    return share(host) / share(cal.host)


def transfer_exchange(
    cal: FrozenCalibration,
    target: CommModel,
    strategy: str,
    r: float,
    *,
    memory_link: bool,
) -> CommModel:
    """The per-strategy exchange model on the target link (rule 2 of the module): alpha and
    beta of ``transport * rho + (exchange_factor - 1) * calibration transport * r``, with
    ``rho = r`` on a memory (loopback) link, else 1. Gossip's duplex is folded into beta.
    Neither term falls below ``FACTOR_RANGE[0]`` times the transport."""
    s = parse_strategy(strategy)
    if not shape_of(s).moves:
        return target
    if s not in cal.exchange_factor:
        raise ValueError(
            f"the calibration has no exchange factor for strategy {s!r} "
            f"(it has {', '.join(cal.exchange_factor)}); calibrate with it"
        )
    rho = r if memory_link else 1.0
    extra = (cal.exchange_factor[s] - 1.0) * r
    c0 = cal.link_model
    gossip = shape_of(s).one_peer
    beta_t = target.beta_s_per_byte * (target.duplex if gossip else 1.0)
    beta_0 = c0.beta_s_per_byte * (c0.duplex if gossip else 1.0)
    lo = FACTOR_RANGE[0]
    alpha = max(lo * rho * target.alpha_s, rho * target.alpha_s + extra * c0.alpha_s)
    beta = max(lo * rho * beta_t, rho * beta_t + extra * beta_0)
    return CommModel(alpha, beta, 1.0 if gossip else target.duplex)


def transfer_host(cal: FrozenCalibration, host: HostShare, strategy: str, r: float) -> HostShare:
    """The target host with the calibrated overlap and staleness-1 costs times ``r``
    (only where it has no spare core: elsewhere overlap hides and they do not apply)."""
    if host.spare_core:
        return HostShare(host.cores, host.ranks_per_host)
    s = parse_strategy(strategy)
    return HostShare(
        host.cores,
        host.ranks_per_host,
        0.0,
        cal.stale_s_per_byte.get(s, 0.0) * r,
        cal.overlap_s * r,
    )


def _refuse_in_sample(cal: FrozenCalibration, size: int, link: str) -> None:
    if (size, link) == (cal.size, cal.link):
        raise ValueError(
            f"size {size} on {link!r} is where the calibration was fitted: its "
            "runs are in-sample, not held out; predict other sizes or links"
        )


def predict_local_s(profile: Profile, cal: FrozenCalibration, host: HostShare) -> float:
    """The compute-only step on ``host`` (rule 3): ``(F + B + O) * compute_factor * r``."""
    return profile.local_step_s * cal.compute_factor * share_ratio(cal, host)


def predict_held_out(
    profile: Profile,
    target: CommModel,
    cal: FrozenCalibration,
    strategy: str,
    size: int,
    *,
    host: HostShare,
    link: str,
    staleness: int = 0,
    overlap: bool = True,
) -> StepTime:
    """Step time of one configuration at ``size`` ranks on ``host`` and ``link`` (whose
    alpha-beta fit is ``target``) from ``cal`` alone: ``step_time`` of the profile scaled by
    ``compute_factor * r``, the transferred exchange model and host. Raises ``ValueError``
    for the calibration's own size and link. Modifies nothing."""
    _refuse_in_sample(cal, size, link)
    r = share_ratio(cal, host)
    comm = transfer_exchange(cal, target, strategy, r, memory_link=link == LOOPBACK)
    return step_time(
        scale_profile(profile, cal.compute_factor * r),
        comm,
        strategy,
        size,
        staleness=staleness,
        overlap=overlap,
        host=transfer_host(cal, host, strategy, r),
    )
