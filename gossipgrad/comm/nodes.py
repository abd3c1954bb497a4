"""Gossip between nodes: which ranks share a node, and the moves of a node-level exchange.

With several ranks (GPUs) on one node, plain gossip sends one whole bucket per rank through
the node's one network interface. ``--strategy gossip-node`` averages within each node
first and gossips between nodes, the ranks of a node each carrying one shard
(:mod:`gossipgrad.engine.bucket.nodemix` does the arithmetic). Per bucket of ``n`` bytes and ``r``
ranks on a node, each rank sends ``(r - 1) n / r`` to its node's other ranks twice (their
shards in, its mixed shard back out) and ``n / r`` to the rank with its local index on the
partner node: the node's interface carries ``n`` a step, as one rank's gossip does, whatever
``r``.

Nodes: ranks with the same host and network namespace (:func:`node_layout`), or blocks of
``GOSSIPGRAD_RANKS_PER_NODE`` consecutive ranks where that is set. Every node must hold as
many ranks, so that shard ``i`` has one counterpart on every node.

    >>> layout = NodeLayout(((0, 1), (2, 3), (4, 5)))
    >>> layout.ranks_per_node, layout.where(3), layout.rank(2, 1)
    (2, (1, 1), 5)
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, Request, Tag, WaitContext
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.hosts import host_id
from gossipgrad.comm.schedule import Peers, Schedule
from gossipgrad.comm.sharded import host_or_device
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Transport
from gossipgrad.settings import VARIABLES

logger = logging.getLogger(__name__)

RANKS_PER_NODE_ENV = "GOSSIPGRAD_RANKS_PER_NODE"
_ROW = next(v for v in VARIABLES if v.name == RANKS_PER_NODE_ENV)  # its parser (settings.toml)


@dataclass(frozen=True)
class NodeLayout:
    """The ranks of each node (ascending), nodes in the order of their lowest rank."""

    nodes: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        sizes = sorted({len(n) for n in self.nodes})
        if len(sizes) != 1:
            counts = ", ".join(str(len(n)) for n in self.nodes)
            raise ValueError(
                f"--strategy gossip-node needs as many ranks on every node, got {counts}: "
                f"launch the same number per node (mpiexec -ppn N, srun --ntasks-per-node N) "
                f"or set {RANKS_PER_NODE_ENV}"
            )

    @property
    def ranks_per_node(self) -> int:
        return len(self.nodes[0])

    def where(self, rank: int) -> tuple[int, int]:
        """(node, index within the node) of ``rank``."""
        for node, members in enumerate(self.nodes):
            if rank in members:
                return node, members.index(rank)
        raise ValueError(f"rank {rank} is on no node of {self.nodes}")

    def rank(self, node: int, local: int) -> int:
        return self.nodes[node][local]


def blocks(size: int, ranks_per_node: int) -> NodeLayout:
    """Nodes of ``ranks_per_node`` consecutive ranks.

    >>> blocks(6, 3).nodes
    ((0, 1, 2), (3, 4, 5))
    """
    if ranks_per_node < 1 or size % ranks_per_node:
        raise ValueError(
            f"{RANKS_PER_NODE_ENV}={ranks_per_node} does not divide {size} ranks into nodes "
            f"of as many ranks; set it to a divisor of {size} (or unset it to group by host)"
        )
    return NodeLayout(
        tuple(tuple(range(s, s + ranks_per_node)) for s in range(0, size, ranks_per_node))
    )


def node_layout(comm: Communicator) -> NodeLayout:
    """The job's nodes: ``GOSSIPGRAD_RANKS_PER_NODE`` consecutive ranks where it is set
    (the same on every rank), else ranks sharing a host and network namespace. Collective:
    one allreduce of raw int64s, whatever the case, so no rank waits for another that
    decided alone."""
    text = os.environ.get(RANKS_PER_NODE_ENV, "").strip()  # read now: tests set it per run
    try:
        mine = _ROW.parse(text) if text else 0
    except ValueError:
        mine = -1  # not a number of ranks
    table = np.zeros((comm.size, 2), dtype=np.int64)
    table[comm.rank] = (host_id(netns=True), mine)
    allreduce_(comm, table, what="node layout")
    asked = sorted(set(table[:, 1].tolist()))
    if len(asked) > 1 or asked[0] < 0:
        said = "unset" if mine == 0 else repr(text)
        seen = ", ".join({0: "unset", -1: "not a number of ranks"}.get(a, str(a)) for a in asked)
        raise ValueError(
            f"{RANKS_PER_NODE_ENV} must be one whole number >= 1 on every rank (here {said}; "
            f"over the ranks: {seen}); export the same value to every rank, or unset it to "
            f"group ranks by host"
        )
    if asked[0] > 0:
        return blocks(comm.size, asked[0])
    nodes: dict[int, list[int]] = {}
    for rank, h in enumerate(table[:, 0].tolist()):
        nodes.setdefault(h, []).append(rank)
    return NodeLayout(tuple(tuple(m) for m in sorted(nodes.values())))


class NodeTransport(Transport):
    """The moves of a node-level gossip step for one bucket (bytes only; the engine sums
    and mixes): :meth:`scatter` each shard to its owner on this node, :meth:`exchange`
    this rank's shard with its counterpart on the schedule's partner node, :meth:`gather`
    every owner's shard back. Float32 buffers on the host, or on a device with a
    CUDA-aware MPI (without one, :class:`~gossipgrad.engine.bucket.nodemix.NodeMix` stages the
    whole bucket through host memory first)."""

    moves = True

    def __init__(
        self, comm: Communicator, layout: NodeLayout, seed: int = 0, rotate: bool = True,
        stager: Stager | None = None, topology: str = "auto",
    ) -> None:  # fmt: skip
        super().__init__(comm, stager)
        self.layout = layout
        self.node, self.local = layout.where(comm.rank)
        self.members = layout.nodes[self.node]
        try:  # the schedule is over nodes: a hypercube needs a power of two of them
            self.schedule = Schedule(len(layout.nodes), topology, seed, rotate)
        except ValueError as exc:
            raise ValueError(f"--strategy gossip-node schedules the nodes: {exc}") from None
        self._recv: dict[tuple[int, int], torch.Tensor] = {}

    def bounds(self, numel: int) -> list[tuple[int, int]]:
        """``[lo, hi)`` of each local index's shard of ``numel`` values."""
        r = self.layout.ranks_per_node
        return [(i * numel // r, (i + 1) * numel // r) for i in range(r)]

    def peers(self, step: int) -> Peers | None:
        """This step's partner nodes (None: one node, or idle this step)."""
        peers = self.schedule.peers(self.node, step)
        return None if peers is None or peers.idle else peers

    def scatter(self, buf: torch.Tensor, index: int, step: int, tag: int) -> list[Request]:
        """Send each other rank of the node its shard of ``buf``; receive theirs of this
        rank's shard into :meth:`received` buffers."""
        spans = self.bounds(buf.numel())
        lo, hi = spans[self.local]
        requests = []
        for i, r in enumerate(self.members):
            if i != self.local:
                recv = self._buffer(index, i, hi - lo, buf)
                ctx = WaitContext("sent nothing", r, tag, step)
                requests.append(self.comm.irecv(host_or_device(recv), r, tag, ctx))
        for i, r in enumerate(self.members):
            if i != self.local:
                a, b = spans[i]
                ctx = WaitContext("received nothing", r, tag, step)
                requests.append(self.comm.isend(host_or_device(buf[a:b]), r, tag, ctx))
        return requests

    def received(self, index: int) -> list[torch.Tensor]:
        """The other ranks' copies of this rank's shard from the last :meth:`scatter` of
        bucket ``index``, in local-index order."""
        r = self.layout.ranks_per_node
        return [self._recv[(index, i)] for i in range(r) if i != self.local]

    def exchange(
        self, shard: torch.Tensor, peers: Peers, index: int, step: int, tag: int
    ) -> tuple[list[Request], torch.Tensor]:
        """Send ``shard`` (this rank's shard of the node's mean, or its encoding) to this
        local index's rank on ``peers.dst``'s node and receive the one from ``peers.src``'s
        into a buffer like it; the requests and the receive buffer."""
        tag += Tag.NODE_PEER
        dst = self.layout.rank(peers.dst, self.local)
        src = self.layout.rank(peers.src, self.local)
        recv = self._buffer(index, -1, shard.numel(), shard)
        into = WaitContext("sent nothing", src, tag, step)
        out = WaitContext("received nothing", dst, tag, step)
        requests = [
            self.comm.irecv(host_or_device(recv), src, tag, into),
            self.comm.isend(host_or_device(shard), dst, tag, out),
        ]
        return requests, recv

    def gather(self, buf: torch.Tensor, index: int, step: int, tag: int) -> list[Request]:
        """Send this rank's shard of ``buf`` to the node's other ranks; receive each of
        theirs into its place in ``buf``."""
        tag += Tag.SHARD_GATHER
        spans = self.bounds(buf.numel())
        lo, hi = spans[self.local]
        requests = []
        for i, r in enumerate(self.members):
            if i != self.local:
                a, b = spans[i]
                ctx = WaitContext("sent nothing", r, tag, step)
                requests.append(self.comm.irecv(host_or_device(buf[a:b]), r, tag, ctx))
        for i, r in enumerate(self.members):
            if i != self.local:
                ctx = WaitContext("received nothing", r, tag, step)
                requests.append(self.comm.isend(host_or_device(buf[lo:hi]), r, tag, ctx))
        return requests

    def bytes_per_step(self, nbytes: int, wire_nbytes: int | None = None) -> float:
        """Bytes this rank sends per step for a bucket of ``nbytes``: its node's other
        ranks their shards and its mixed shard back (float32), and its shard to the partner
        node (``wire_nbytes`` for the whole bucket where a codec encodes that exchange)."""
        r = self.layout.ranks_per_node
        wire = nbytes if wire_nbytes is None else wire_nbytes
        between = wire / r * self.schedule.active_share if len(self.layout.nodes) > 1 else 0
        return 2 * (r - 1) / r * nbytes + between

    def _buffer(self, index: int, i: int, numel: int, like: torch.Tensor) -> torch.Tensor:
        hit = self._recv.get((index, i))
        if hit is None or hit.numel() != numel or hit.dtype != like.dtype:
            hit = self._recv[(index, i)] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return hit


def node_transport(
    comm: Communicator, schedule: Schedule, stager: Stager | None = None, topology: str = "auto"
) -> NodeTransport:
    """The transport of ``--strategy gossip-node``: finds the nodes (collective) and gossips
    between them along ``topology`` over the nodes, with ``schedule``'s seed and rotation."""
    layout = node_layout(comm)
    if comm.rank == 0:
        logger.info(
            "gossip-node: %d nodes of %d ranks, a schedule over the nodes",
            len(layout.nodes),
            layout.ranks_per_node,
        )
    return NodeTransport(comm, layout, schedule.seed, schedule.rotate, stager, topology)
