"""``--strategy gossip-node``: gossip between nodes, each node's ranks averaged first
(:mod:`gossipgrad.engine.bucket.nodemix`). A node's network interface carries one bucket's bytes a
step whatever its number of ranks, where plain gossip sends one per rank; within the node
each rank moves ``2 (r - 1) / r`` of each bucket over the node's own links (NVLink, PCIe,
shared memory). A wire codec (``--wire bf16``) encodes the exchange between nodes only,
where the network interface is the bottleneck; the node's own moves stay float32."""

from __future__ import annotations

from typing import Any

from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.nodemix import NodeMix
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.gossip import Gossip


class GossipNode(Gossip):
    name = "gossip-node"
    summary = (
        "gossip between nodes, a node's ranks averaged first: one bucket per node a step "
        "through its network interface"
    )
    # gossip's options less those a lockstep exchange of whole buckets cannot take
    uses = Gossip.uses - {"max_lag", "rule", "sufficient_factors"}
    shape = "node"
    factor_pattern = None
    shrink = False
    refusals = {
        "max_lag": "a node's shards are averaged in lockstep; use --strategy gossip for a lag",
        "rule": "it mixes with the schedule's weights (average)",
        "sufficient_factors": "it sends whole buckets; use --strategy gossip for factors",
    }

    def mixer(
        self, comm: Any, schedule: Any, stager: Any, topology: str, codec: Any, rule: Any
    ) -> BucketMixer:
        """Its transport with the three-stage node mix (:mod:`gossipgrad.engine.bucket.nodemix`)."""
        transport = self.transport(comm, schedule, stager, topology)
        return BucketMixer(transport, codec, rule, whole=NodeMix(transport, rule, codec))

    def cannot_shrink(self, opts: Any) -> str | None:
        return "its nodes are fixed at start-up (use --strategy gossip to shrink on a failure)"


STRATEGIES.register(GossipNode.name, GossipNode())
