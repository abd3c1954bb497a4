"""Step-time model of one training step with bucketed, overlapped communication.

After Yan et al., "Performance Modeling and Scalability Optimization of Distributed Deep
Learning Systems" (KDD 2015): compute times come from a profile, communication from an
alpha-beta fit of the network, and the two are combined on a timeline. Pure: no MPI, no torch.

Per-bucket communication cost of ``n`` bytes at ``p`` ranks (0 when ``p == 1``):

- gossip: one simultaneous send and receive with one peer, ``alpha + duplex * beta * n``
  (``duplex`` = 1 on full-duplex links, up to 2 where send and receive share the link);
- allreduce / horovod (ring): ``2(p-1) alpha + 2(p-1)/p * n * beta``, each term optionally
  scaled by a factor calibrated from a measured allreduce fit;
- local: 0.

Timeline (times from the start of backward, buckets in backward order): bucket ``b`` starts
at ``max(ready_b, end_{b-1})`` and ends ``cost_b`` later; one communication thread, so the
chain is serial. With ``overlap=False`` every bucket is ready only at the end of backward.
Where the strategy posts its allreduces as the buckets fill (gossipgrad's own, gradients)
and netfit measured several in flight at once, a bucket ready before the previous one ends
(queued) costs what one of several in flight did: its bytes use the link while the one
ahead reduces or waits on a partner (:meth:`CommModel.queued_costs`).

    >>> m = CommModel(alpha_s=1e-3, beta_s_per_byte=0.0)
    >>> comm_chain([0.1, 0.2], [m.bucket_s("gossip", 100, size=2)] * 2)
    [0.101, 0.201]

The terms beyond the alpha-beta fit (a shared bottleneck, ranks sharing a NIC,
hierarchical allreduce, a parameter server's busiest server and two rounds, compute slowed
by communication beside it, the host's work per byte) are fields of :class:`CommModel`;
their defaults give the plain model.
"""

# Over 300 lines on purpose: the communication model and the timeline that uses it, together.

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gossipgrad.registry import STRATEGIES
from gossipgrad.tools.plan.fabric import Fabric, shared_from_concurrent
from gossipgrad.tools.plan.fluid import Round, run
from gossipgrad.tools.plan.formats import AllreduceFit, Bucket, NetworkFit, Profile
from gossipgrad.tools.plan.host import HostShare
from gossipgrad.tools.plan.patterns import server_rounds, split_parts

MIB = 1 << 20


def parse_strategy(strategy: str) -> str:
    """The registered strategy name ``strategy`` (ValueError listing the choices)."""
    return STRATEGIES.get(strategy).name


def shape_of(strategy: str) -> Any:
    """How ``strategy`` moves a bucket: its exchange shape (:class:`gossipgrad.specs.ShapeSpec`),
    which carries its own time and memory model (``gossipgrad/shapes/``): the model's cost
    follows it, a plugin's shape as a built-in one."""
    return STRATEGIES.get(strategy).exchange_shape


def _check_size(size: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be an integer >= 1, got {size!r}")


@dataclass(frozen=True)
class CommModel:
    """Alpha-beta communication model.

    Args:
        alpha_s: one-way latency of a point-to-point message (s).
        beta_s_per_byte: inverse bandwidth (s/byte).
        duplex: 1.0 for full-duplex links; 2.0 when a simultaneous send and receive
            serialise (the bandwidth term of a gossip exchange doubles). In [1, 2].
        allreduce_latency_factor, allreduce_bandwidth_factor: multiply the ring formula's
            latency and bandwidth terms; 1.0 is the ideal ring. ``1 / factor`` is the
            allreduce implementation's efficiency relative to the ring built from p2p.
        gossip_factor: multiplies a gossip bucket's cost (1.0: the p2p fit as it is; set
            by the in-step calibration, :mod:`gossipgrad.tools.plan.calibrate`).
        fabric: how the ranks share the network (ranks per NIC, a shared bottleneck,
            hierarchical allreduce; :mod:`gossipgrad.tools.plan.fabric`). The default is the
            plain model: one rank per node, nothing shared.
        interference: seconds of compute added per second of communication running beside
            it (a GPU's copy engines and kernels, a host's cores and memory bus). >= 0.
        host_s_per_byte: the rank's own work per byte exchanged on the communication
            thread (mixing, copies, reductions), added to every bucket's cost. >= 0.
        queued_latency_factor, queued_bandwidth_factor: the ring factors of an allreduce
            posted while another is in flight (netfit's ``allreduce_in_flight`` sweep);
            None: a queued bucket costs what one alone does.
        wire_ratio: bytes on the wire per byte of bucket (a wire codec's; 1.0: fp32 as it
            is). Set it with :func:`on_the_wire`, which also scales the per-byte link times;
            here it only counts the bytes sent. In (0, 1].
    """

    alpha_s: float
    beta_s_per_byte: float
    duplex: float = 1.0
    allreduce_latency_factor: float = 1.0
    allreduce_bandwidth_factor: float = 1.0
    gossip_factor: float = 1.0
    fabric: Fabric = Fabric()
    interference: float = 0.0
    host_s_per_byte: float = 0.0
    queued_latency_factor: float | None = None
    queued_bandwidth_factor: float | None = None
    wire_ratio: float = 1.0

    def __post_init__(self) -> None:
        if not self.alpha_s >= 0:
            raise ValueError(f"alpha_s must be >= 0, got {self.alpha_s}")
        if not self.beta_s_per_byte >= 0:
            raise ValueError(f"beta_s_per_byte must be >= 0, got {self.beta_s_per_byte}")
        if not 1.0 <= self.duplex <= 2.0:
            raise ValueError(f"duplex must be in [1, 2], got {self.duplex}")
        for name in ("allreduce_latency_factor", "allreduce_bandwidth_factor", "gossip_factor"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("interference", "host_s_per_byte"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not 0 < self.wire_ratio <= 1:
            raise ValueError(f"wire_ratio must be in (0, 1], got {self.wire_ratio!r}")
        queued = (self.queued_latency_factor, self.queued_bandwidth_factor)
        if (queued[0] is None) != (queued[1] is None):
            raise ValueError("queued_latency_factor and queued_bandwidth_factor go together")
        if queued[0] is not None and not (queued[0] > 0 and queued[1] > 0):
            raise ValueError(f"queued ring factors must be > 0, got {queued}")

    @classmethod
    def from_network(
        cls, net: NetworkFit, *, duplex: float = 1.0, calibrate_allreduce: bool = False
    ) -> CommModel:
        """Build from a netfit. With ``calibrate_allreduce`` the measured allreduce fit at
        ``net.allreduce.size`` ranks sets the two ring factors (measured / ring-predicted
        latency and bandwidth terms); they are then applied at every size. The fabric
        comes from the concurrent sweep (a shared bottleneck where every rank sending at
        once was slower than one pair's exchange, :func:`shared_from_concurrent`) and the
        ranks per node; with ``calibrate_allreduce`` and an ``allreduce_in_flight`` fit,
        that fit's factors price a queued bucket (:meth:`queued_costs`)."""
        latency = bandwidth = 1.0
        queued: tuple[float | None, float | None] = (None, None)
        if calibrate_allreduce:
            latency, bandwidth = allreduce_factors(net)
            if net.allreduce_in_flight is not None:
                queued = allreduce_factors(net, net.allreduce_in_flight)
        shared = 0.0
        cc = net.concurrent
        if cc is not None and net.p2p.beta_s_per_byte > 0:
            exchange = duplex * net.p2p.beta_s_per_byte
            shared = shared_from_concurrent(cc.beta_s_per_byte, cc.size, exchange)
        fabric = Fabric(ranks_per_node=net.ranks_per_node or 1, shared_s_per_byte=shared)
        return cls(
            net.p2p.alpha_s,
            net.p2p.beta_s_per_byte,
            duplex,
            latency,
            bandwidth,
            fabric=fabric,
            queued_latency_factor=queued[0],
            queued_bandwidth_factor=queued[1],
        )

    def bucket_s(self, strategy: str, nbytes: float, size: int) -> float:
        """Seconds to exchange one bucket of ``nbytes`` at ``size`` ranks (a parameter
        server's bucket as its share of evenly loaded servers: :meth:`bucket_costs` sees
        the whole step): the strategy's shape prices it on this link."""
        _check_size(size)
        spec = STRATEGIES.get(strategy)
        if size == 1 or not spec.exchange_shape.moves:
            return 0.0
        return float(spec.exchange_shape.bucket_s(self, spec, nbytes, size))

    def queued_costs(
        self, strategy: str, nbytes: Sequence[int], size: int, mix: str = "grad"
    ) -> list[float] | None:
        """Every bucket's cost when it is posted while the one ahead is still in flight
        (the shape's; the ring's at netfit's queued factors for gossipgrad's own allreduce of
        gradients), or None: a queued bucket costs what one alone does. ``mix`` counts only
        for a strategy that has no mix of its own."""
        spec = STRATEGIES.get(strategy)
        return spec.exchange_shape.queued_costs(self, spec, list(nbytes), size, mix)

    def bucket_costs(self, strategy: str, nbytes: Sequence[int], size: int) -> list[float]:
        """Every bucket's cost in one step (a parameter server's from its busiest node)."""
        _check_size(size)
        spec = STRATEGIES.get(strategy)
        if size == 1 or not spec.exchange_shape.moves:
            return [0.0] * len(nbytes)
        return list(spec.exchange_shape.step_costs(self, spec, list(nbytes), size))


def on_the_wire(model: CommModel, ratio: float) -> CommModel:
    """``model`` for buckets that a wire codec sends as ``ratio`` bytes per byte (bf16 and
    fp16 0.5, fp8 0.252: the codec's ``wire_ratio``): every per-byte time of the links (the
    p2p fit's, the intra-node link's, the shared bottleneck's) times ``ratio``, so every
    shape's bucket costs the bytes it puts on the wire. Latency, the host's work per byte
    of bucket and compute are unchanged; the codec's own encode and decode time is not
    priced (a cast on a GPU; measure it with ``bench codecs``). Under a lossy codec
    gossipgrad's allreduce runs its own sharded mean over point-to-point sends (encodings
    cannot be summed); with one rank a node it moves a ring's bytes and is priced as the
    ring at the measured MPI allreduce factors, a proxy for what a ring's bytes achieve on
    these links (not a fit); with several, each node's NIC carries more than a ring's edge
    and the shards are priced as they move (:func:`~gossipgrad.shapes.ring.sharded_s`).

        >>> m = CommModel(1e-5, 1e-9)
        >>> half = on_the_wire(m, 0.5)
        >>> round(half.bucket_s("gossip", 1e6, 8) / m.bucket_s("gossip", 1e6, 8), 3)
        0.505
        >>> on_the_wire(half, 0.5).wire_ratio
        0.25
    """
    if not 0 < ratio <= 1:
        raise ValueError(f"a codec's wire ratio must be in (0, 1], got {ratio!r}")
    f = model.fabric
    intra = None if f.intra_beta_s_per_byte is None else f.intra_beta_s_per_byte * ratio
    return replace(
        model,
        beta_s_per_byte=model.beta_s_per_byte * ratio,
        fabric=replace(
            f, intra_beta_s_per_byte=intra, shared_s_per_byte=f.shared_s_per_byte * ratio
        ),
        wire_ratio=model.wire_ratio * ratio,
    )


def allreduce_factors(net: NetworkFit, fit: AllreduceFit | None = None) -> tuple[float, float]:
    """(latency, bandwidth) factors: measured allreduce terms (``fit``, default the network's
    one-at-a-time allreduce) / ring terms from the p2p fit."""
    ar, p2p = net.allreduce if fit is None else fit, net.p2p
    if ar is None:
        raise ValueError(
            "network has no 'allreduce' fit; run netfit with >= 2 ranks or "
            "leave calibrate_allreduce off"
        )
    if ar.size < 2:
        raise ValueError(f"network field 'allreduce.size' must be >= 2 to calibrate, got {ar.size}")
    if p2p.alpha_s <= 0 or p2p.beta_s_per_byte <= 0:
        raise ValueError(
            "network fields 'p2p.alpha_s' and 'p2p.beta_s_per_byte' must be > 0 "
            "to calibrate the allreduce model"
        )
    p = ar.size
    return (
        ar.alpha_s / (2 * (p - 1) * p2p.alpha_s),
        ar.beta_s_per_byte / (2 * (p - 1) / p * p2p.beta_s_per_byte),
    )


def bytes_sent(strategy: str, nbytes: int, size: int) -> float:
    """Bytes one rank sends to exchange one bucket (ring allreduce: ``2(p-1)/p * n``)."""
    _check_size(size)
    return STRATEGIES.get(strategy).bytes_per_step(nbytes, size)


def rebucket(
    buckets: Sequence[Bucket],
    cap_bytes: int | None,
    window_s: float | None = None,
    *,
    registration: bool = False,
) -> tuple[Bucket, ...]:
    """Merge consecutive buckets (backward order) into buckets of at most ``cap_bytes``.

    A bucket is closed when adding the next would exceed the cap; a single input bucket
    larger than the cap stays on its own (buckets are never split). The merged ready time is
    the max of its members'; indices are renumbered from 0. ``None`` keeps the input.

    ``window_s``: a library that wakes every ``window_s`` seconds and fuses what became
    ready since its last wake-up (Horovod's cycle): buckets merge only within one cycle,
    and a merged bucket is ready at the wake-up that sends it (cycles counted from the
    start of the step), so a gradient ready just after a wake-up waits up to one cycle.

        >>> bs = [Bucket(0, 3, 0.1), Bucket(1, 3, 0.2), Bucket(2, 5, 0.3)]
        >>> [(b.bytes, b.ready_s) for b in rebucket(bs, 6)]
        [(6, 0.2), (5, 0.3)]
        >>> [(b.bytes, round(b.ready_s, 9)) for b in rebucket(bs, 100, window_s=0.25)]
        [(6, 0.25), (5, 0.5)]

    ``registration``: merge as the engine's ``BucketLayout`` does, in reverse registration
    order (input: one bucket per parameter, ``index`` its position among the model's
    parameters, ``Profile.per_parameter``), listed by ready time. A layer registered last
    that backward reaches late (GoogLeNet's auxiliary heads) holds back the first bucket::

        >>> ps = [Bucket(2, 4, 0.1), Bucket(1, 4, 0.2), Bucket(3, 4, 0.3), Bucket(0, 4, 0.4)]
        >>> [(b.bytes, b.ready_s) for b in rebucket(ps, 8, registration=True)]
        [(8, 0.3), (8, 0.4)]
        >>> [(b.bytes, b.ready_s) for b in rebucket(ps, 8)]
        [(8, 0.2), (8, 0.4)]
    """
    if cap_bytes is not None and (
        isinstance(cap_bytes, bool) or not isinstance(cap_bytes, int) or cap_bytes < 1
    ):
        raise ValueError(f"cap_bytes must be an integer >= 1 or None, got {cap_bytes!r}")
    if window_s is not None and not (window_s >= 0 and math.isfinite(window_s)):
        raise ValueError(f"window_s must be a finite number >= 0 or None, got {window_s!r}")
    if registration:
        if window_s is not None:
            raise ValueError("registration order and a fusion window do not combine")
        groups = _groups(sorted(buckets, key=lambda b: -b.index), cap_bytes, lambda b: 0.0)
        merged = sorted((max(m.ready_s for m in g), sum(m.bytes for m in g)) for g in groups)
        return tuple(Bucket(i, nbytes, ready) for i, (ready, nbytes) in enumerate(merged))
    if cap_bytes is None:
        return tuple(buckets)

    def sent_at(b: Bucket) -> float:
        if not window_s:
            return b.ready_s
        return math.ceil(b.ready_s / window_s - 1e-9) * window_s

    cycle = sent_at if window_s is not None else (lambda b: 0.0)
    return tuple(
        Bucket(i, sum(m.bytes for m in g), max(max(m.ready_s for m in g), sent_at(g[-1])))
        for i, g in enumerate(_groups(buckets, cap_bytes, cycle))
    )


def split_large(buckets: Sequence[Bucket], cap_bytes: int) -> tuple[Bucket, ...]:
    """A parameter server's buckets: each one above ``cap_bytes`` (one parameter larger
    than a server's share) split into parts of at most the cap that different ranks own
    (:func:`~gossipgrad.tools.plan.patterns.split_parts`), ready when the whole is; renumbered.

        >>> [(b.bytes, b.ready_s) for b in split_large([Bucket(0, 10, 0.1), Bucket(1, 2, 0.2)], 4)]
        [(3, 0.1), (3, 0.1), (4, 0.1), (2, 0.2)]
    """
    parts = [(b.ready_s, n) for b in buckets for n in split_parts(b.bytes, cap_bytes)]
    return tuple(Bucket(i, n, ready) for i, (ready, n) in enumerate(parts))


def _groups(
    ordered: Sequence[Bucket], cap_bytes: int | None, cycle: Callable[[Bucket], float]
) -> list[list[Bucket]]:
    """Consecutive runs of ``ordered`` of at most ``cap_bytes`` (None: one run) within one
    ``cycle``; a bucket larger than the cap is a run of its own."""
    groups: list[list[Bucket]] = []
    total = 0
    for b in ordered:
        fits = cap_bytes is None or total + b.bytes <= cap_bytes
        if groups and fits and cycle(groups[-1][0]) == cycle(b):
            groups[-1].append(b)
            total += b.bytes
        else:
            groups.append([b])
            total = b.bytes
    return groups


def comm_chain(ready_s: Sequence[float], cost_s: Sequence[float]) -> list[float]:
    """End time of each bucket's exchange on one serial communication thread:
    ``end_b = max(ready_b, end_{b-1}) + cost_b`` with ``end_{-1} = 0``."""
    if len(ready_s) != len(cost_s):
        raise ValueError(f"ready_s and cost_s differ in length: {len(ready_s)} != {len(cost_s)}")
    ends, t = [], 0.0
    for ready, cost in zip(ready_s, cost_s, strict=True):
        t = max(ready, t) + cost
        ends.append(t)
    return ends


def queue_chain(
    ready_s: Sequence[float], alone_s: Sequence[float], queued_s: Sequence[float]
) -> tuple[list[float], list[float]]:
    """(end, cost) of each transfer on one serial communication thread, in the given order:
    a transfer ready before the one ahead of it ends was queued behind it and costs
    ``queued_s``, one that finds the thread idle ``alone_s``.

        >>> queue_chain([0.0, 0.1, 5.0], [1.0, 1.0, 1.0], [0.5, 0.5, 0.5])
        ([1.0, 1.5, 6.0], [1.0, 0.5, 1.0])
    """
    if not len(ready_s) == len(alone_s) == len(queued_s):
        raise ValueError("ready_s, alone_s and queued_s differ in length")
    ends, costs, t = [], [], 0.0
    for i, (ready, alone, queued) in enumerate(zip(ready_s, alone_s, queued_s, strict=True)):
        cost = queued if i and ready < t else alone
        t = max(ready, t) + cost
        ends.append(t)
        costs.append(cost)
    return ends, costs


@dataclass(frozen=True)
class StepTime:
    """Predicted steady-state time of one step and its parts (seconds)."""

    step_s: float
    compute_s: float  # forward + backward
    optimizer_s: float
    comm_s: float  # communication busy time per step (bucket costs; w/o spare core + overheads)
    comm_end_s: float  # end of this step's exchange, from step start, if started fresh

    @property
    def exposed_comm_s(self) -> float:
        """Communication time not hidden behind computation."""
        return self.step_s - self.compute_s - self.optimizer_s


# Over 60 lines on purpose: the step's timeline (forward, the bucket chain, the optimizer) is
# one formula; its terms are documented inline.
def step_time(
    profile: Profile,
    model: CommModel,
    strategy: str,
    size: int,
    *,
    staleness: int = 0,
    overlap: bool = True,
    host: HostShare | None = None,
    mix: str = "grad",
    extra: Sequence[tuple[float, float]] = (),
) -> StepTime:
    """Predict the steady-state step time. ``F, B, O`` = forward, backward, optimizer times;
    ``end_last`` = end of the bucket chain (times from backward start); ``S`` = sum of costs (a
    bucket queued behind another at its queued cost: :meth:`CommModel.queued_costs`);
    ``c`` = ``model.interference``, ``H`` = the chain's busy time beside compute.

    - staleness 0: the optimizer waits for this step's exchange,
      ``T = F + max(B + c H, end_last) + O``. With ``overlap=False`` this is
      ``F + B + S + O``.
    - ``mix="param"`` (a peer strategy mixing parameters): the buckets leave after the
      optimizer, first layer first, and forward waits for each before the layers that use
      it, bucket ``b`` being needed at ``F (1 - r_b / B)`` (forward mirrors backward):
      ``T = F + wait + c H + B + O``.
    - staleness 1: the exchange posted at step t need only finish before step t+1's
      optimizer, so it overlaps step t+1's forward and backward (and, the thread being free,
      the optimizer too). In steady state ``T = max(F + B + O + c min(S, F + B), S)``:
      communication is hidden up to a full step, beyond that the communication thread sets
      the pace. (Proof sketch: ``T >= S`` since the serial thread must do S of work per
      step, ``T >= F+B+O`` for the compute; with ``T`` the max of both, every chain ends
      within ``F + B + S <= T + F + B`` of its step's start, i.e. before the next step's
      optimizer, so nobody waits.)
    - a parameter server (an ``incast`` shape, :func:`_server_step`): each bucket's push
      leaves when it is ready and queues on its owner's link, the owner updates it once
      the push is in and its own ``step()`` has come (plus the host's work), and its pull
      queues on the owner's link outbound; forward waits for each bucket before the layers
      that use it: ``T = max(B + c H + O, last push) + F + wait + c H_f``.
    - ``extra``: more transfers on the same thread as ``(ready_s, cost_s)`` (sufficient
      factors: :func:`gossipgrad.tools.plan.factors.factor_transfers`), chained with the
      buckets in ready order.

    - no spare core (``host`` given and ``host.spare_core`` false: fewer than 2 cores per
      rank): the communication thread competes with compute for the rank's core, so
      nothing is hidden, at either staleness: ``T = F + B + S + O``, plus
      ``host.overlap_s + n * host.handoff_s`` (``n`` buckets handed to the thread) when
      ``overlap``,
      plus ``G * host.stale_s_per_byte`` at staleness 1 (``G`` = gradient bytes; negative
      where staleness 1 hides part of the exchange, never more than ``S``), both only
      when the strategy communicates. ``host=None`` assumes a spare core.
    """
    if staleness not in (0, 1):
        raise ValueError(f"staleness must be 0 or 1, got {staleness!r}")
    if mix not in ("grad", "param"):
        raise ValueError(f"mix must be 'grad' or 'param', got {mix!r}")
    _check_size(size)
    nbytes = [b.bytes for b in profile.buckets]
    costs = model.bucket_costs(strategy, nbytes, size)
    queued = model.queued_costs(strategy, nbytes, size, mix)
    if host is not None and not host.spare_core:
        costs = [*costs, *(c for _, c in extra)]
        return _serial_step(profile, costs, strategy, size, staleness, overlap, host)
    f, b, o, c = profile.forward_s, profile.backward_s, profile.optimizer_s, model.interference
    total = sum(costs) + sum(cost for _, cost in extra)
    if staleness == 1:
        ready = [bk.ready_s if overlap else b for bk in profile.buckets]
        ends, costs = queue_chain(ready, costs, costs if queued is None else queued)
        end = ends[-1] if ends else 0.0
        total = sum(costs) + sum(cost for _, cost in extra)
        step = max(f + b + o + c * min(total, f + b), total)
        return StepTime(step, profile.compute_s, o, total, f + end)
    if mix == "param" and shape_of(strategy).forward_wait:
        if not overlap:
            return StepTime(f + b + o + total, profile.compute_s, o, total, total)
        wait, busy, end = forward_wait(profile, costs)
        return StepTime(f + wait + c * busy + b + o, profile.compute_s, o, total, end)
    if shape_of(strategy).incast and size > 1:
        step, end = _server_step(profile, model, size, extra, overlap)
    else:
        step, end, total = _backward_chain(profile, model, costs, extra, overlap, queued)
    return StepTime(step, profile.compute_s, o, total, f + end)


def _backward_chain(
    profile: Profile,
    model: CommModel,
    costs: Sequence[float],
    extra: Sequence[tuple[float, float]],
    overlap: bool,
    queued: Sequence[float] | None = None,
) -> tuple[float, float, float]:
    """(step time, end of the chain from backward's start, the chain's busy time) of
    buckets sent as they are ready (staleness 0, gradients); ``queued``: each bucket's
    cost when it waits behind the one ahead (:func:`queue_chain`; None: its cost)."""
    f, b, o, c = profile.forward_s, profile.backward_s, profile.optimizer_s, model.interference
    queued = costs if queued is None else queued
    transfers = sorted(
        [
            (bk.ready_s if overlap else b, cost, q)
            for bk, cost, q in zip(profile.buckets, costs, queued, strict=True)
        ]
        + [(r if overlap else b, cost, cost) for r, cost in extra],
        key=lambda t: t[0],
    )
    ends, chain_costs = queue_chain(
        [t[0] for t in transfers], [t[1] for t in transfers], [t[2] for t in transfers]
    )
    end = ends[-1] if ends else 0.0
    step = f + max(b + c * busy_within(ends, chain_costs, b), end) + o
    return step, end, sum(chain_costs)


def _server_step(
    profile: Profile,
    model: CommModel,
    size: int,
    extra: Sequence[tuple[float, float]],
    overlap: bool,
) -> tuple[float, float]:
    """(step time, end of the last pull from backward's start) of a parameter server.

    Bucket ``b``'s push leaves at its ready time, an incast of every other rank into its
    owner (:func:`gossipgrad.tools.plan.patterns.server_rounds`); the owner updates it at
    ``max(push end, its step())`` plus ``host_s_per_byte * n_b``, and its pull then goes
    out to every other rank. Every push and pull in flight at once shares the ports it
    crosses (:func:`gossipgrad.tools.plan.fluid.run`). ``step()`` comes after backward
    (stretched by the interference of the pushes beside it) and after the factor
    transfers (``extra``, on the rank's own thread); forward starts after the optimizer
    and once the pushes have left (``zero_grad`` waits for them), and waits for each
    bucket's pull before the layers that use it, at ``F (1 - r_b / B)``. Without overlap
    it waits for every pull at once."""
    f, b, o, c = profile.forward_s, profile.backward_s, profile.optimizer_s, model.interference
    side = sorted((r if overlap else b, cost) for r, cost in extra)
    side_ends = comm_chain([r for r, _ in side], [cost for _, cost in side])
    side_spans = [(e - cost, e) for e, (_, cost) in zip(side_ends, side, strict=True)]
    timeline = _ServerTimeline(profile, model, size, overlap)
    at_step = max([b, *side_ends])
    pushed, pulled = timeline.run(at_step)
    if c > 0:  # pulls start at step(), so the pushes' spans before it do not depend on it
        stretched = b + c * covered([*pushed, *side_spans], 0.0, b)
        if stretched > at_step:
            at_step = stretched
            pushed, pulled = timeline.run(at_step)
    push_ends, pull_ends = [e for _, e in pushed], [e for _, e in pulled]
    start = max([at_step + o, *push_ends, *([] if overlap else pull_ends)])
    needs = [start + (f * (1 - bk.ready_s / b) if b > 0 else 0.0) for bk in profile.buckets]
    wait = max([0.0, *(e - n for e, n in zip(pull_ends, needs, strict=True))])
    busy_f = covered(pulled, start, start + f + wait)
    return start + f + wait + c * busy_f, max([0.0, *pull_ends])


class _ServerTimeline:
    """The pushes and pulls of one step of a parameter server on the fluid network."""

    def __init__(self, profile: Profile, model: CommModel, size: int, overlap: bool) -> None:
        self.buckets = profile.buckets
        self.net, self.rounds = server_rounds(
            [bk.bytes for bk in self.buckets],
            size,
            model.alpha_s,
            model.beta_s_per_byte,
            model.fabric,
        )
        self.ready = [bk.ready_s if overlap else profile.backward_s for bk in self.buckets]
        self.host = model.host_s_per_byte

    def run(self, at_step: float) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """Per bucket, the (start, end) of its push and of its pull, the owners updating
        at ``at_step`` at the earliest."""
        nb = len(self.buckets)
        order: list[int] = []  # the bucket of each pull, in the order they were added

        def pull_after(i: int, end: float) -> list[Round]:
            if i >= nb:
                return []
            order.append(i)
            ready = max(end, at_step) + self.host * self.buckets[i].bytes
            return [replace(self.rounds[i][1], ready_s=ready)]

        pushes = [replace(p, ready_s=r) for (p, _), r in zip(self.rounds, self.ready, strict=True)]
        spans = run(self.net, pushes, pull_after)
        pulled = [(0.0, 0.0)] * nb
        for i, span in zip(order, spans[nb:], strict=True):
            pulled[i] = span
        return spans[:nb], pulled


def covered(spans: Sequence[tuple[float, float]], lo: float, hi: float) -> float:
    """Seconds of ``[lo, hi]`` inside at least one of the intervals ``spans``.

    >>> round(covered([(0.0, 0.2), (0.1, 0.3), (0.5, 0.6)], 0.0, 0.55), 9)
    0.35
    """
    total, reach = 0.0, lo
    for s, e in sorted(spans):
        s, e = max(s, reach), min(e, hi)
        if e > s:
            total += e - s
            reach = e
    return total


def forward_wait(profile: Profile, costs: Sequence[float]) -> tuple[float, float, float]:
    """Buckets sent after the optimizer, first layer first, each needed by forward at
    ``F (1 - r_b / B)`` (forward mirrors backward): ``(how long forward waits, the chain's
    busy time beside forward, the chain's end)`` (a peer's parameter mix; a parameter
    server's pull)."""
    f, b = profile.forward_s, profile.backward_s
    needs = [f * (1 - bk.ready_s / b) if b > 0 else 0.0 for bk in profile.buckets]
    order = list(reversed(range(len(costs))))  # forward order: the first layer's first
    ordered = [costs[i] for i in order]
    ends = comm_chain([0.0] * len(order), ordered)
    wait = max([0.0, *(e - needs[i] for e, i in zip(ends, order, strict=True))])
    return wait, busy_within(ends, ordered, f + wait), ends[-1] if ends else 0.0


def busy_within(ends: Sequence[float], costs: Sequence[float], window: float) -> float:
    """Seconds of the chain (each transfer ``[end - cost, end]``) inside ``[0, window]``.

    >>> round(busy_within([0.2, 0.5], [0.1, 0.2], 0.4), 9)
    0.2
    """
    return covered([(e - c, e) for e, c in zip(ends, costs, strict=True)], 0.0, window)


def _serial_step(
    profile: Profile,
    costs: Sequence[float],
    strategy: str,
    size: int,
    staleness: int,
    overlap: bool,
    host: HostShare,
) -> StepTime:
    """``step_time`` when the rank has no spare core: compute, then every bucket's exchange
    (plus, when overlapped, the per-step and per-bucket hand-off costs, and staleness 1's
    per-byte cost), then the optimizer."""
    communicates = size > 1 and shape_of(strategy).moves
    handoff = host.overlap_s + len(costs) * host.handoff_s if overlap and communicates else 0.0
    stale = profile.grad_bytes * host.stale_s_per_byte if staleness == 1 and communicates else 0.0
    stale = max(stale, -sum(costs))  # staleness 1 hides at most the whole exchange
    busy = sum(costs) + handoff + stale
    step = profile.compute_s + busy + profile.optimizer_s
    return StepTime(step, profile.compute_s, profile.optimizer_s, busy, profile.compute_s + busy)


def efficiency(profile: Profile, step_s: float) -> float:
    """E = T(1) / T(size), T(1) = the compute-only step (forward + backward + optimizer).
    Equals per-rank throughput relative to one rank: samples/s = size * batch / T."""
    if not step_s > 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    return profile.local_step_s / step_s


def samples_per_s(profile: Profile, size: int, step_s: float) -> float:
    _check_size(size)
    if not step_s > 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    return size * profile.batch_size / step_s
