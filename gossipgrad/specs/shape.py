"""What an exchange shape is (``SHAPES.register(name, spec)``): how one bucket's bytes move
each step (to one peer, around a ring, to an owner and back, through a node), with the
transport that moves them, the bytes each rank sends, and the time and memory models the
planner prices it by. A strategy names its shape (``StrategySpec.shape``); nothing else
switches on it, so a plugin's shape is trained, counted and planned like a built-in one.

The time model is written against a *link*: the planner's network model
(:class:`gossipgrad.tools.plan.model.CommModel`), read through its attributes
(``alpha_s``, ``beta_s_per_byte``, ``duplex``, ``fabric``, ``host_s_per_byte``,
``wire_ratio``, ``gossip_factor``, ``allreduce_latency_factor``,
``allreduce_bandwidth_factor``, ``queued_*``); the runtime never builds one. PURE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


class ShapeSpec:
    """One exchange shape.

    Class attributes:
        name: the registry key a strategy's ``shape`` names.
        summary: one line.
        moves: it sends anything at all (False: ``local``).
        collective: every rank posts each bucket's exchange, in the same order, at every
            step (no rank can run ahead); the caller orders the posts.
        one_peer: one send to this step's peer; a step the schedule leaves idle sends
            nothing (bytes per step scale with the schedule's active share).
        sums: values are added on the way (an allreduce): a codec whose encodings cannot
            be summed gets the decoded, sharded mean instead.
        own_schedule: it schedules something else than the ranks (gossip-node: nodes);
            the schedule over ranks is then ``auto`` and ``--topology`` is its own.
        incast: each bucket goes to one owner and back (a parameter server): the planner
            prices its two rounds on a shared network, not bucket by bucket.
        forward_wait: the planner prices a parameter mix on it as waits in the next
            forward (the one-peer shapes); otherwise as a chain after backward.
        exchange_factor: which of the link's calibration factors scales its cost:
            ``"gossip"`` (point to point), ``"allreduce"`` (the ring's), or None.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    moves: ClassVar[bool] = True
    collective: ClassVar[bool] = False
    one_peer: ClassVar[bool] = False
    sums: ClassVar[bool] = False
    own_schedule: ClassVar[bool] = False
    incast: ClassVar[bool] = False
    forward_wait: ClassVar[bool] = False
    exchange_factor: ClassVar[str | None] = "allreduce"

    def transport(self, comm: Any, schedule: Any, stager: Any, topology: str) -> Any:
        """The runtime transport of one communicator (built again after a shrink)."""
        raise ValueError(f"shape {self.name!r} has no bucket transport: its strategy moves them")

    def bytes_per_step(self, nbytes: float, size: int) -> float:
        """Bytes one rank sends per step for ``nbytes`` of buckets at ``size`` ranks (a
        mean over ranks where they differ; a shape that does not move sends none)."""
        if self.moves:
            raise NotImplementedError(f"shape {self.name!r} does not price its bytes")
        return 0.0

    def bucket_s(self, link: Any, strategy: Any, nbytes: float, size: int) -> float:
        """Seconds to exchange one bucket of ``nbytes`` at ``size`` ranks on ``link``
        (``strategy``: the spec, for what its library changes; 0 where nothing moves)."""
        if self.moves:
            raise NotImplementedError(f"shape {self.name!r} does not price its time")
        return 0.0

    def step_costs(self, link: Any, strategy: Any, nbytes: list[int], size: int) -> list[float]:
        """Every bucket's cost in one step (default: each on its own)."""
        return [self.bucket_s(link, strategy, n, size) for n in nbytes]

    def queued_costs(
        self, link: Any, strategy: Any, nbytes: list[int], size: int, mix: str
    ) -> list[float] | None:
        """Each bucket's cost when posted while the one ahead is in flight; None: as alone."""
        return None

    def memory(self, load: ExchangeLoad) -> list[tuple[str, int]]:
        """Buffers one rank holds for the exchange of ``load`` beyond parameters, gradients
        and optimizer state: ``(what, bytes)`` (a lossy codec's wires, residuals and
        scratch where ``load.lossy``)."""
        return []


@dataclass(frozen=True)
class ExchangeLoad:
    """What a step exchanges, as a shape's memory model reads it.

    Attributes:
        grads: bytes of gradients in all buckets.
        buckets: each bucket's bytes.
        size: ranks.
        staleness: 1 for a stale exchange (an owner's slack where the shape has owners).
        ratio: wire bytes per byte of a lossy codec (1.0: none).
        feedback: the codec keeps error-feedback residuals.
        ranks_per_node: ranks behind one network interface.
    """

    grads: int
    buckets: tuple[int, ...]
    size: int
    staleness: int = 0
    ratio: float = 1.0
    feedback: bool = False
    ranks_per_node: int = 1

    @property
    def lossy(self) -> bool:
        return self.ratio < 1

    @property
    def largest(self) -> int:
        return max(self.buckets)
