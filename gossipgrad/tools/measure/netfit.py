"""Measure the network the planner models: ping-pong, exchange and allreduce sweeps.

    mpiexec -n 2 gossipgrad netfit --out network.json

Three sweeps (:mod:`gossipgrad.tools.measure.sweeps`) over message sizes, powers of two from
``min_bytes`` up to ``max_bytes``, each size ``reps`` times after one warm-up, the median
kept (``stat="min"`` keeps the fastest rep instead: robust when other processes compete for
the CPUs and deschedule a spinning rank for a scheduler tick, as on a busy shared machine;
optimistic on a shared network):

- **ping-pong** between rank 0 and ``peer``: one-way time = round trip / 2. Fitted as the
  ``p2p`` link (``alpha + beta * n``) the model is built on.
- **exchange** on the same pair: both send and receive at once, as a gossip step does; the
  ratio of its ``beta`` to the ping-pong's estimates the model's ``duplex`` (1 = full duplex).
- **allreduce** of a float32 buffer on all ranks (time = the slowest rank's), fitted at the
  launched size; it grows to at least ``allreduce_bytes`` (32 MiB: training's buckets are
  25 MiB by default) however long a message takes, since an MPI allreduce's cost per byte
  at a few MiB need not be its cost at the sizes training sends;
- **allreduce in flight**: ``allreduce_in_flight`` (4) allreduces of ``n`` bytes each posted
  at once and waited together, the time per allreduce fitted as above (grown until as many
  bytes are in flight as the allreduce sweep's largest message holds): a training step's
  buckets queue behind each other, and while one allreduce reduces or waits on a partner
  the next one's bytes can use the link, so a queued bucket may cost less than one alone;
- **concurrent**: every rank sends to the next and receives from the previous at once (a
  ring shift), the load a training step puts on the links and on whatever the ranks share
  (a NIC, the switch, the host's cores doing TCP); fitted at the launched size. Its
  ``beta`` over the exchange's is how much bandwidth falls when the whole job sends
  (:mod:`gossipgrad.tools.plan.terms`).

``ranks_per_node`` counts the ranks that share a network interface: one host, or one
network namespace of it (the emulated cluster's ranks share a host's cores, not a NIC).

A sweep stops growing the message after the first size whose kept time exceeds
``max_message_s``, so slow (emulated) links stay quick to measure. Only raw buffers move,
through the :class:`~gossipgrad.comm.base.Communicator` protocol; the times are the
transport's, without the runtime's polling back-off (see
:mod:`gossipgrad.tools.measure.sweeps`).

Collective: every rank calls :func:`measure_network` and gets the same :class:`NetfitResult`
(each rep's time is the maximum over ranks; ranks outside the pair contribute 0).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.hosts import host_id
from gossipgrad.runtime import host_share
from gossipgrad.settings import settings
from gossipgrad.tools.measure import sweeps
from gossipgrad.tools.measure.sweeps import STATS, Sweep, message_sizes
from gossipgrad.tools.plan.formats import AllreduceFit, ConcurrentFit, NetworkFit
from gossipgrad.tools.plan.host import HostShare

KIB, MIB = 1 << 10, 1 << 20
DEFAULT_MIN_BYTES = 4 * KIB
LOOPBACK_MAX_BYTES = 64 * MIB  # every rank on one host
CLUSTER_MAX_BYTES = 256 * MIB
DEFAULT_REPS = 10
DEFAULT_MAX_MESSAGE_S = 0.25
DEFAULT_ALLREDUCE_BYTES = 32 * MIB
DEFAULT_IN_FLIGHT = 4  # about a ResNet-50's 25 MiB buckets: enough to keep a link busy
PINGPONG_SWEEPS = 3
"""Ping-pong sweeps before netfit gives up on a fit: on a host whose CPUs other processes
share, descheduled reps can make the larger messages look no slower than the smaller ones
(no line to fit); a fresh sweep usually does not. Only an unfittable sweep is redone."""


@dataclass(frozen=True)
class NetfitResult:
    """The fitted network plus the measured times behind it."""

    network: NetworkFit
    peer: int
    same_host: bool
    hosts: int
    reps: int
    stat: str
    pingpong: Sweep
    exchange: Sweep | None
    allreduce: Sweep | None
    concurrent: Sweep | None = None
    allreduce_in_flight: Sweep | None = None

    @property
    def duplex(self) -> float | None:
        """``beta`` of a simultaneous exchange / ``beta`` of ping-pong (1 = full duplex)."""
        if self.exchange is None or self.exchange.fit is None:
            return None
        return self.exchange.fit.beta_s_per_byte / self.network.p2p.beta_s_per_byte

    def to_json(self) -> dict[str, Any]:
        """The NetworkFit document plus ``measurements`` (ignored by the planner)."""
        sweeps = {
            "pingpong": self.pingpong,
            "exchange": self.exchange,
            "allreduce": self.allreduce,
            "concurrent": self.concurrent,
            "allreduce_in_flight": self.allreduce_in_flight,
        }
        extra: dict[str, Any] = {
            "peer": self.peer,
            "same_host": self.same_host,
            "hosts": self.hosts,
            "reps": self.reps,
            "stat": self.stat,
            **{k: s.to_json() for k, s in sweeps.items() if s is not None},
        }
        if self.exchange is not None and self.exchange.fit is not None:
            extra["exchange_fit"] = {
                "alpha_s": self.exchange.fit.alpha_s,
                "beta_s_per_byte": self.exchange.fit.beta_s_per_byte,
                "r2": self.exchange.fit.r2,
                "duplex": self.duplex,
            }
        return {**self.network.to_json(), "measurements": extra}


def host_ids(comm: Communicator, *, netns: bool = False) -> np.ndarray:
    """Every rank's :func:`~gossipgrad.comm.hosts.host_id`, indexed by rank (one allreduce
    of raw int64s); ``netns``: ranks in different network namespaces count apart."""
    ids = np.zeros(comm.size, dtype=np.int64)
    ids[comm.rank] = host_id(netns=netns)
    return allreduce_(comm, ids)


def ranks_per_node(node_ids: Sequence[int]) -> int:
    """The most ranks on one node (ranks sharing a network interface).

    >>> ranks_per_node([3, 3, 5, 5, 5]), ranks_per_node([1, 2])
    (3, 1)
    """
    counts: dict[int, int] = {}
    for n in node_ids:
        counts[n] = counts.get(n, 0) + 1
    return max(counts.values())


def choose_peer(hosts: Sequence[int]) -> int:
    """The lowest rank on another host than rank 0, else rank 1: ping-pong crosses the
    network when the job spans hosts (rank 1 is usually on rank 0's node).

    >>> choose_peer([7, 7, 9, 9]), choose_peer([7, 7])
    (2, 1)
    """
    if len(hosts) < 2:
        raise ValueError("a network fit needs >= 2 ranks: mpiexec -n 2 gossipgrad netfit")
    return next((r for r, h in enumerate(hosts) if h != hosts[0]), 1)


# Over 60 lines on purpose: every sweep runs on every rank in the same order (collective): one
# place keeps them matched.
def measure_network(
    comm: Communicator,
    *,
    min_bytes: int = DEFAULT_MIN_BYTES,
    max_bytes: int | None = None,
    reps: int = DEFAULT_REPS,
    peer: int | None = None,
    max_message_s: float = DEFAULT_MAX_MESSAGE_S,
    exchange: bool = True,
    allreduce: bool = True,
    concurrent: bool = True,
    stat: str = "median",
    source: str = "",
    allreduce_bytes: int = DEFAULT_ALLREDUCE_BYTES,
    allreduce_in_flight: int = DEFAULT_IN_FLIGHT,
) -> NetfitResult:
    """Run the sweeps on every rank of ``comm`` (collective) and fit them.

    Args:
        max_bytes: largest message; None = 64 MiB when every rank is on one host, else
            256 MiB.
        peer: rank 0's ping-pong partner; None = :func:`choose_peer`.
        stat: ``median`` or ``min`` over the reps of each size (see the module).
        allreduce_bytes: the allreduce sweep's smallest largest message (capped at
            ``max_bytes``), measured past ``max_message_s`` with at most 3 reps a size.
        allreduce_in_flight: allreduces posted at once in the in-flight sweep (with
            ``allreduce``; below 2: no such sweep), grown to ``allreduce_bytes`` in flight.
        source: text appended to the ``source`` label (host, size and, when set,
            ``GOSSIPGRAD_EMU_RATE`` are always included).
    Raises ``ValueError`` for bad arguments (the same on every rank) and ``CommTimeout``
    when a partner does not answer within ``comm.timeout`` seconds.
    """
    _check_arguments(comm, reps, stat, max_message_s, allreduce_in_flight)
    hosts = host_ids(comm).tolist()
    same_host = len(set(hosts)) == 1
    if max_bytes is None:
        max_bytes = LOOPBACK_MAX_BYTES if same_host else CLUSTER_MAX_BYTES
    sizes = message_sizes(min_bytes, max_bytes)
    peer = choose_peer(hosts) if peer is None else peer
    if not 0 < peer < comm.size:
        raise ValueError(f"peer must be a rank in [1, {comm.size}), got {peer}")

    def sweep(once: Callable[[int], float], grow_to: int = 0) -> Sweep:
        return sweeps.run_sweep(comm, sizes, reps, max_message_s, stat, once, grow_to)

    buf = np.zeros(sizes[-1], dtype=np.uint8)
    pp = sweep(sweeps.pingpong(comm, buf, peer))
    for _ in range(PINGPONG_SWEEPS - 1):  # the same decision on every rank: the same times
        if pp.fit is not None:
            break
        pp = sweep(sweeps.pingpong(comm, buf, peer))
    if pp.fit is None:
        raise ValueError(_unfit_message(pp, peer))
    ex = sweep(sweeps.exchange(comm, buf, np.zeros_like(buf), peer)) if exchange else None
    del buf
    ar = (
        sweep(sweeps.allreduce(comm, np.zeros(sizes[-1] // 4, dtype=np.float32)), allreduce_bytes)
        if allreduce
        else None
    )
    ar_fit = None
    if ar is not None and ar.fit is not None:
        ar_fit = AllreduceFit(ar.fit.alpha_s, ar.fit.beta_s_per_byte, ar.fit.r2, size=comm.size)
    ar_k, ar_k_fit = None, None
    if allreduce and allreduce_in_flight >= 2:
        k = allreduce_in_flight
        ar_k = sweep(  # grown to the same bytes in flight as the one-at-a-time sweep
            sweeps.allreduce_in_flight(comm, np.zeros(k * sizes[-1] // 4, np.float32), k),
            allreduce_bytes // k,
        )
        if ar_k.fit is not None:
            f = ar_k.fit
            ar_k_fit = AllreduceFit(f.alpha_s, f.beta_s_per_byte, f.r2, comm.size, k)
    cc = None
    if concurrent:
        bufs = np.zeros(sizes[-1], dtype=np.uint8), np.zeros(sizes[-1], dtype=np.uint8)
        cc = sweep(sweeps.concurrent(comm, *bufs))
        del bufs
    cc_fit = None
    if cc is not None and cc.fit is not None:
        cc_fit = ConcurrentFit(cc.fit.alpha_s, cc.fit.beta_s_per_byte, cc.fit.r2, size=comm.size)
    label = describe_source(comm.size, peer, same_host, len(set(hosts)), source)
    host = HostShare(*host_share(comm))
    per_node = ranks_per_node(host_ids(comm, netns=True).tolist())
    return NetfitResult(
        NetworkFit(pp.fit, ar_fit, label, host, cc_fit, per_node, ar_k_fit),
        peer,
        same_host,
        len(set(hosts)),
        reps,
        stat,
        pp,
        ex,
        ar,
        cc,
        ar_k,
    )


def _check_arguments(
    comm: Communicator, reps: int, stat: str, max_message_s: float, in_flight: int = 1
) -> None:
    """ValueError (the same on every rank) for arguments no fit can use."""
    if comm.size < 2:
        raise ValueError("a network fit needs >= 2 ranks: mpiexec -n 2 gossipgrad netfit")
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    if not max_message_s > 0:
        raise ValueError(f"max_message_s must be > 0, got {max_message_s}")
    if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 0:
        raise ValueError(f"allreduces in flight must be an integer >= 0, got {in_flight!r}")


def _unfit_message(pp: Sweep, peer: int) -> str:
    times = ", ".join(f"{n}: {t * 1e6:.1f} us" for n, t in zip(pp.nbytes, pp.seconds, strict=True))
    return (
        f"ping-pong between ranks 0 and {peer}, {PINGPONG_SWEEPS} sweeps: {pp.problem} "
        f"(the last measured {times}; "
        "other processes competing for the CPUs or the network can do this: "
        "rerun on an idle machine, with more reps, or with stat 'min')"
    )


def describe_source(size: int, peer: int, same_host: bool, hosts: int, extra: str = "") -> str:
    """``netfit on HOST: ranks 0<->1 on one host, 2 ranks on 1 host(s)[, emulated ...]``."""
    where = "one host" if same_host else "different hosts"
    parts = [
        f"netfit on {socket.gethostname()}: ranks 0<->{peer} on {where}, "
        f"{size} ranks on {hosts} host(s)"
    ]
    env = settings()
    if env.emu_rate:
        delay = f", delay {env.inject_delay_ms:g} ms" if env.inject_delay_ms else ""
        parts.append(f"emulated link rate {env.emu_rate}{delay}")
    if extra:
        parts.append(extra)
    return ", ".join(parts)
