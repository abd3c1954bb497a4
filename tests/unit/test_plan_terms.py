"""The planner's terms beyond one pair's alpha-beta fit, in closed form (pure; issue 22):
bandwidth shared by ranks sending at once, ranks behind one NIC, hierarchical allreduce, a
parameter server's busiest server and two rounds, sufficient-factor bytes, compute slowed
by communication beside it, parameter mixing's timeline."""

from __future__ import annotations

import random

import pytest

from gossipgrad.engine.ps import shards
from gossipgrad.engine.ps.shards import assign_owners
from gossipgrad.shapes.node import node_s
from gossipgrad.shapes.peer import peer_s
from gossipgrad.shapes.ring import ring_s, sharded_s
from gossipgrad.shapes.server import server_loads, server_s, server_wire_bytes
from gossipgrad.tools.plan.fabric import Fabric, shared_from_concurrent
from gossipgrad.tools.plan.fluid import run
from gossipgrad.tools.plan.formats import (
    Bucket,
    ConcurrentFit,
    LinearLayer,
    LinkFit,
    NetworkFit,
    Profile,
)
from gossipgrad.tools.plan.model import CommModel, on_the_wire, step_time
from gossipgrad.tools.plan.patterns import server_rounds
from gossipgrad.tools.plan.planner import plan

A, B = 1e-5, 1e-9  # 10 us, 1 GB/s


def approx(x):
    return pytest.approx(x, rel=1e-12, abs=1e-15)


def profile(buckets, forward=0.1, backward=0.2, optimizer=0.0, linear=()):
    bs = tuple(Bucket(i, n, r) for i, (n, r) in enumerate(buckets))
    total = sum(n for n, _ in buckets)
    return Profile("toy", 8, "gpu", forward, backward, optimizer, total, bs, linear=linear)


def test_plain_fabric_gives_the_plain_formulas():
    f = Fabric()
    assert peer_s(1000, 8, A, B, 1.5, f) == approx(A + 1.5 * B * 1000)
    assert ring_s(1000, 8, A, B, f) == approx(2 * 7 * A + 2 * 7 / 8 * 1000 * B)
    assert peer_s(1000, 1, A, B, 1.0, f) == ring_s(1000, 1, A, B, f) == 0.0


def test_shared_bottleneck_slows_every_rank_once_the_job_fills_it():
    f = Fabric(shared_s_per_byte=0.5e-9)  # 2 GB/s for everyone together
    assert peer_s(1000, 2, A, B, 1.0, f) == approx(A + 1000 * B)  # 2 x 1 GB/s fits
    assert peer_s(1000, 8, A, B, 1.0, f) == approx(A + 1000 * 8 * 0.5e-9)  # 0.25 GB/s each
    # a ring moves 2 (p - 1) n bytes in all per bucket
    assert ring_s(1000, 8, A, B, f) == approx(2 * 7 * A + 2 * 7 * 1000 * 0.5e-9)


def test_shared_term_is_read_from_the_concurrent_sweep_only_when_it_shows():
    assert shared_from_concurrent(9.6e-9, 8, 3.5e-9) == approx(1.2e-9)
    assert shared_from_concurrent(4.0e-9, 8, 3.5e-9) == 0.0  # within 25 %: the link itself
    with pytest.raises(ValueError, match="size >= 2"):
        shared_from_concurrent(1e-9, 1, 1e-9)


def test_from_network_reads_the_concurrent_fit_and_ranks_per_node():
    net = NetworkFit(
        LinkFit(A, 3.5e-9, 1.0),
        concurrent=ConcurrentFit(0.0, 9.6e-9, 1.0, size=8),
        ranks_per_node=4,
    )
    m = CommModel.from_network(net)
    assert m.fabric.shared_s_per_byte == approx(1.2e-9)
    assert m.fabric.ranks_per_node == 4
    assert CommModel.from_network(NetworkFit(LinkFit(A, B, 1.0))).fabric == Fabric()


def test_ranks_sharing_a_nic_slow_gossip_by_the_expected_streams_off_the_node():
    f = Fabric(ranks_per_node=4, intra_alpha_s=0.0, intra_beta_s_per_byte=0.0)
    # 16 ranks, 4 per node: a peer is off the node 12 / 15 of the time, 3.2 ranks at once
    assert peer_s(1000, 16, A, B, 1.0, f) == approx(A + 1000 * B * 4 * 12 / 15)
    assert peer_s(1000, 4, A, B, 1.0, f) == 0.0  # one node, a free intra link


def test_node_gossip_sends_one_bucket_per_nic_whatever_the_ranks_on_it():
    """gossip-node at 8 ranks a node: each NIC carries the bucket once (8 shards of n/8 at
    once), where plain gossip sends up to 8 whole buckets through it; within the node each
    rank moves 2 x 7/8 of it over the intra link."""
    ai, bi = 1e-6, 1e-10
    f = Fabric(ranks_per_node=8, intra_alpha_s=ai, intra_beta_s_per_byte=bi)
    n = 1000
    within = 2 * (7 * ai + 7 / 8 * n * bi)
    assert node_s(n, 32, A, B, 1.0, f) == approx(within + A + n * B)
    assert node_s(n, 8, A, B, 1.0, f) == approx(within)  # one node: the node's mean only
    big = 10**7  # where bandwidth decides: about 6.2 of 8 ranks send off the node at once
    assert node_s(big, 32, A, B, 1.0, f) < peer_s(big, 32, A, B, 1.0, f) / 4
    one = Fabric()  # a rank per node: gossip as it is
    assert node_s(n, 32, A, B, 1.0, one) == approx(peer_s(n, 32, A, B, 1.0, one))
    prof = Profile("m", 32, "gpu", 0.1, 0.2, 0.0, 8 * n, (Bucket(0, 8 * n, 0.2),))
    m = CommModel(A, B, fabric=f)
    mixed = {
        s: step_time(prof, m, s, 32, mix="param", overlap=False).step_s
        for s in ("gossip", "gossip-node")
    }
    assert mixed["gossip-node"] < mixed["gossip"]  # and the parameter mix's timeline takes it


def test_node_gossip_with_a_codec_encodes_only_the_exchange_between_nodes():
    """--wire bf16 on gossip-node: the exchange off the node costs half its bytes, the
    moves within the node (float32) what they cost without it."""
    ai, bi = 1e-6, 1e-10
    f = Fabric(ranks_per_node=8, intra_alpha_s=ai, intra_beta_s_per_byte=bi)
    n = 1000
    within = 2 * (7 * ai + 7 / 8 * n * bi)
    half = on_the_wire(CommModel(A, B, fabric=f), 0.5)
    assert half.bucket_s("gossip-node", n, 32) == approx(within + A + n * B / 2)
    assert half.bucket_s("gossip-node", n, 8) == approx(within)  # one node: nothing encoded


def test_a_decoded_allreduce_prices_its_shards_through_each_nic():
    """gossipgrad's allreduce through bf16, 8 ranks as 2 nodes of 4: each stage a NIC
    carries 4 x 4/8 of the bucket (its ranks' shards to the other node's owners), twice
    the ring's edge for the whole allreduce; at one rank a node the ring's price stays."""
    ai, bi = 1e-6, 1e-10
    f = Fabric(ranks_per_node=4, intra_alpha_s=ai, intra_beta_s_per_byte=bi)
    n = 1000
    assert sharded_s(n, 8, A, B, 1.0, f) == approx(2 * (A + 4 * 4 / 8 * n * B))
    assert sharded_s(n, 4, A, B, 1.0, f) == approx(2 * (ai + 3 / 4 * n * bi))  # one node
    half = on_the_wire(CommModel(A, B, fabric=f), 0.5)
    assert half.bucket_s("allreduce", n, 8) == approx(sharded_s(n, 8, A, B / 2, 1.0, f))
    assert half.bucket_s("horovod", n, 8) == approx(ring_s(n, 8, A, B / 2, f))  # summed casts
    flat = on_the_wire(CommModel(A, B), 0.5)
    assert flat.bucket_s("allreduce", n, 8) == approx(ring_s(n, 8, A, B / 2, Fabric()))


def test_hierarchical_allreduce_crosses_the_nic_once_per_node():
    f = Fabric(ranks_per_node=8, intra_alpha_s=0.0, intra_beta_s_per_byte=0.0, hierarchical=True)
    p, m = 32, 4
    assert ring_s(1000, p, A, B, f) == approx(2 * (m - 1) * A + 2 * (m - 1) / m * 1000 * B)
    flat = Fabric(ranks_per_node=8, intra_alpha_s=0.0, intra_beta_s_per_byte=0.0)
    assert ring_s(1000, p, A, B, flat) == approx(2 * (p - 1) * A + 2 * (p - 1) / p * 1000 * B)


@pytest.mark.parametrize("seed", range(5))
def test_server_assignment_and_loads_are_the_engines(seed):
    rng = random.Random(seed)
    nbytes = [rng.randint(1, 10_000) for _ in range(rng.randint(1, 12))]
    size = rng.randint(1, 9)
    owners = assign_owners(nbytes, size)
    assert owners == shards.assign_owners(nbytes, size)
    assert server_loads(nbytes, size)[0] == shards.bytes_sent_by_rank(nbytes, owners, size)


def test_a_dominant_bucket_makes_its_server_the_bottleneck():
    nbytes = [740, 130, 130]  # VGG-16-like: one layer 74 % of the model
    p = 8
    assert server_wire_bytes(nbytes, p, Fabric()) == (p - 1) * 740 + 260
    costs = server_s(nbytes, p, A, B, Fabric())
    wire = ((p - 1) * 740 + 260) * B
    assert costs == [approx(2 * A + wire * n / 1000) for n in nbytes]
    ring = sum(ring_s(n, p, 0.0, B, Fabric()) for n in nbytes)
    assert sum(costs) - 6 * A > 3 * ring  # the ring model was optimistic by over 3x here


def test_even_servers_cost_the_ring_bandwidth_and_twice_the_rounds():
    p = 4
    nbytes = [250] * 4
    assert server_wire_bytes(nbytes, p, Fabric()) == 2 * (p - 1) * 250 * 4 // p
    cm = CommModel(A, B)
    assert sum(cm.bucket_costs("ps", nbytes, p)) == approx(4 * 2 * A + 2 * (p - 1) / p * 1000 * B)


def test_server_nodes_count_only_traffic_off_the_node():
    f = Fabric(ranks_per_node=2)
    # 4 ranks on 2 nodes, one bucket each: a node's NIC carries its 2 owners' pulls to the 2
    # ranks of the other node and its 2 ranks' pushes to the other node's 2 owners
    assert server_wire_bytes([100] * 4, 4, f) == 2 * 2 * 100 + 2 * 2 * 100


def test_step_time_charges_a_ps_at_its_busiest_server():
    prof = profile([(740, 0.05), (130, 0.1), (130, 0.2)])
    ps = step_time(prof, CommModel(0.0, 1e-4), "ps", 8)
    ar = step_time(prof, CommModel(0.0, 1e-4), "allreduce", 8)
    assert ps.comm_s == approx(((8 - 1) * 740 + 260) * 1e-4)
    assert ps.step_s > ar.step_s


def test_interference_stretches_backward_by_the_communication_beside_it():
    prof = profile([(1000, 0.0)], forward=0.1, backward=0.2)
    cm = CommModel(0.0, 1e-4, interference=0.5)  # 0.1 s of exchange from backward's start
    t = step_time(prof, cm, "gossip", 2)
    assert t.step_s == approx(0.1 + 0.2 + 0.5 * 0.1)
    plain = step_time(prof, CommModel(0.0, 1e-4), "gossip", 2)
    assert plain.step_s == approx(0.3)


def test_param_mix_waits_in_forward_for_the_first_layers_bucket():
    # backward order: bucket 0 (last layer, ready at 0.1), bucket 1 (first layer, at 0.2)
    prof = profile([(1000, 0.1), (1000, 0.2)], forward=0.1, backward=0.2)
    cm = CommModel(0.0, 0.5e-4)  # 0.05 s per bucket
    t = step_time(prof, cm, "gossip", 2, mix="param")
    # forward order: bucket 1 (needed at 0) ends at 0.05, bucket 0 (needed at 0.05) at 0.1
    assert t.step_s == approx(0.1 + 0.05 + 0.2)
    assert step_time(prof, cm, "gossip", 2, mix="param", overlap=False).step_s == approx(0.4)
    with pytest.raises(ValueError, match="mix must be"):
        step_time(prof, cm, "gossip", 2, mix="both")


def test_sufficient_factors_enter_the_step_time_and_the_bytes():
    # one Linear 4096 x 4096 (64 MiB of gradient) seen by 32 rows per step
    n = 4096 * 4096 * 4
    prof = profile([(n, 0.05), (4096 * 4, 0.06)], linear=(LinearLayer(0, 4096, 4096, 32),))
    cm = CommModel(1e-5, 1e-8)  # 0.1 GB/s: the matrix does not hide behind backward
    rows = {
        (r.strategy, f): r
        for f in ("off", "auto")
        for r in plan(prof, cm, sizes=[8], bucket_mb=[100], staleness=[0], sufficient_factors=f)
    }
    for s in ("gossip", "allreduce"):
        off, auto = rows[(s, "off")], rows[(s, "auto")]
        assert auto.bytes_per_step < off.bytes_per_step / 10
        assert auto.step_s < off.step_s and auto.comm_s < off.comm_s / 10
    block = 32 * (4096 + 4096) * 4
    assert rows[("gossip", "auto")].bytes_per_step == approx(block + 4096 * 4)


def test_profile_linear_layers_round_trip_and_name_bad_fields():
    prof = profile([(400, 0.1)], linear=(LinearLayer(0, 10, 10, 4),))
    assert Profile.from_json(prof.to_json()) == prof
    doc = prof.to_json()
    doc["linear"][0]["bucket"] = 7
    with pytest.raises(ValueError, match=r"'linear\[0\].bucket' names no bucket"):
        Profile.from_json(doc)


def test_a_parameter_server_pushes_during_backward_and_pulls_before_forward():
    cm = CommModel(0.0, 1e-4)
    # one bucket, two ranks: rank 1 pushes it into its owner (0.1 s), then the owner's pull
    # comes back (0.1 s): the two rounds of the bucket ready last are both exposed
    late = profile([(1000, 0.2)], forward=0.1, backward=0.2)
    assert step_time(late, cm, "ps", 2).step_s == approx(0.2 + 0.1 + 0.1 + 0.1)
    # owners [0, 1]: bucket 0 (last layer) pushed 0-0.05, updated at step() (0.2); bucket 1
    # (first layer) pushed at 0.2. Bucket 0's pull (rank 0 -> 1) and bucket 1's push
    # (rank 0 -> 1) cross the same link at once: each at half rate, both end at 0.3.
    # Bucket 1's pull (rank 1 -> 0) then takes 0.3-0.35, and forward, started at 0.3 once
    # the pushes have left, needs it at once
    two = profile([(500, 0.0), (500, 0.2)], forward=0.1, backward=0.2)
    assert step_time(two, cm, "ps", 2).step_s == approx(0.3 + 0.05 + 0.1)
    host = step_time(late, CommModel(0.0, 1e-4, host_s_per_byte=1e-5), "ps", 2)
    assert host.step_s == approx(0.5 + 0.01)  # the owner's work comes before its pull
    # without overlap both pushes leave at step(), one each way (side by side), then both
    # pulls, and forward starts once every pull is in
    assert step_time(two, cm, "ps", 2, overlap=False).step_s == approx(0.2 + 0.05 + 0.05 + 0.1)


def test_each_bucket_is_an_incast_and_every_port_carries_the_step_twice():
    # 8 ranks, 8 equal buckets (one per owner) all ready at once: every push crosses every
    # other rank's outbound link, so each owner's 7 x 1000 bytes come in at the link's rate
    # only because all 8 pushes share the senders' links: all end at 8 x 7 x 1000 x beta / 8
    p, n, beta = 8, 1000, 1e-5
    prof = profile([(n, 0.2)] * p, forward=0.1, backward=0.2)
    t = step_time(prof, CommModel(0.0, beta), "ps", p)
    # pushes 0.2-0.27, pulls 0.27-0.34 (each rank's inbound takes 7 pulls of 1000 bytes)
    assert t.step_s == approx(0.27 + 0.07 + 0.1)
    # one bucket alone: its pull out of the owner's link is the whole 7 x 1000 bytes too
    one = profile([(n, 0.2)], forward=0.1, backward=0.2)
    assert step_time(one, CommModel(0.0, beta), "ps", p).step_s == approx(0.2 + 0.14 + 0.1)
    # the evenly shared busy time the step's total charges
    assert sum(CommModel(0.0, beta).bucket_costs("ps", [n] * p, p)) == approx(2 * 7 * n * beta)


def test_the_inbound_link_takes_pushes_and_other_owners_pulls_together():
    # 2 ranks, owners [0, 1]: bucket 0 (ready 0) is pushed by rank 1 into rank 0 and
    # pulled back at step() (0.1); bucket 1 (ready 0.1) is pushed by rank 0 into rank 1 at
    # the same time as bucket 0's pull leaves rank 0 for rank 1: both share that direction
    beta = 1e-4
    prof = profile([(1000, 0.0), (1000, 0.1)], forward=0.0, backward=0.1)
    # push 0: 0-0.1; pull 0 and push 1 at half rate each: 0.1-0.3; pull 1: 0.3-0.4
    assert step_time(prof, CommModel(0.0, beta), "ps", 2).step_s == approx(0.4)


def test_server_rounds_use_the_nodes_nic_and_the_shared_bottleneck():
    f = Fabric(ranks_per_node=2, intra_beta_s_per_byte=1e-9)
    # 4 ranks on 2 nodes: a bucket's push crosses its owner's NIC from the 2 other-node
    # ranks and its intra link from the one on its node
    net, pairs = server_rounds([100] * 4, 4, A, B, f)
    assert net.counts == (2, 2)
    push, pull = pairs[0]
    assert dict(push.hot) == {("in", 0): 200, ("intra-in", 0): 100}
    assert (push.spread, push.node, push.spread_bytes) == ("out", 0, 100)
    assert dict(pull.hot) == {("out", 0): 200, ("intra-out", 0): 100}
    assert [e for _, e in run(net, [push])] == [approx(A + 200 * B)]
    shared = Fabric(shared_s_per_byte=1e-8)  # 100 MB/s for everyone together
    net, [(push, _)] = server_rounds([100], 4, 0.0, B, shared)
    assert [e for _, e in run(net, [push])] == [approx(max(3 * 100 * 1e-8, 3 * 100 * B))]
    net, pairs = server_rounds([100, 5], 1, A, B, Fabric())
    assert net.counts == (1,) and all(r.empty for pair in pairs for r in pair)


@pytest.mark.parametrize("ratio", [0.5, 0.252])
def test_a_wire_codec_prices_the_bytes_it_puts_on_the_wire(ratio):
    """Every pattern's bucket pays latency in full and ``ratio`` of its bandwidth term; the
    bytes a plan row sends scale by ``ratio``; host work per byte of bucket is unchanged."""
    from gossipgrad.tools.plan.model import on_the_wire

    n, p = 4_000_000, 8
    f = Fabric(ranks_per_node=2, intra_beta_s_per_byte=B / 10, shared_s_per_byte=B / 4)
    m = CommModel(A, B, 1.5, fabric=f, host_s_per_byte=1e-11)
    coded = on_the_wire(m, ratio)
    host = 1e-11 * n
    scaled = Fabric(2, None, B / 10 * ratio, B / 4 * ratio)
    full = CommModel(A, B * ratio, 1.5, fabric=scaled)
    expect = full.bucket_s("gossip", n, p) + host
    assert coded.bucket_s("gossip", n, p) == approx(expect)
    assert coded.bucket_s("gossip", n, p) < m.bucket_s("gossip", n, p)
    # allreduce decodes before it adds: its shards, at the codec's bytes (at 2 ranks a node
    # more through each NIC than a float32 ring's edge: not necessarily faster)
    expect = sharded_s(n, p, A, B * ratio, 1.5, scaled) + host
    assert coded.bucket_s("allreduce", n, p) == approx(expect)
    assert coded.bucket_costs("ps", [n, n], p) == approx(
        [c + host for c in full.bucket_costs("ps", [n, n], p)]
    )
    prof = profile([(n, 0.1), (n, 0.2)])
    rows = [plan(prof, x, sizes=[p], strategies=["gossip"], bucket_mb=[1], staleness=[0])[0]
            for x in (m, coded)]  # fmt: skip
    assert rows[1].bytes_per_step == approx(ratio * rows[0].bytes_per_step)
    assert coded.wire_ratio == ratio and on_the_wire(coded, 0.5).wire_ratio == approx(ratio / 2)
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="wire ratio"):
            on_the_wire(m, bad)


def test_a_codec_scales_the_intra_node_link_too():
    """Eight ranks on one node: every exchange crosses the intra-node link, whose per-byte
    time the codec scales as it does the network's."""
    from gossipgrad.tools.plan.model import on_the_wire

    n, p = 4_000_000, 8
    node = CommModel(A, B, fabric=Fabric(ranks_per_node=p, intra_beta_s_per_byte=B / 10))
    plain_s = node.bucket_s("gossip", n, p)
    assert on_the_wire(node, 0.5).bucket_s("gossip", n, p) == approx(A + 0.5 * (plain_s - A))
