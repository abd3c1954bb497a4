"""--strategy gossip-node's layout and its refusals, in-process (its mixing is checked by
tests/support/multirank/checks.py, in-process and under mpiexec)."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.comm.nodes import RANKS_PER_NODE_ENV, NodeLayout, blocks, node_layout
from gossipgrad.options import ExchangeOptions
from gossipgrad.strategies import build_optimizer


def test_nodes_of_unequal_size_are_refused_with_what_to_do():
    with pytest.raises(ValueError, match=r"as many ranks on every node, got 2, 1: launch"):
        NodeLayout(((0, 1), (2,)))
    with pytest.raises(ValueError, match=rf"{RANKS_PER_NODE_ENV}=3 does not divide 4 ranks"):
        blocks(4, 3)


@pytest.mark.timeout(60)
def test_the_layout_comes_from_the_variable_or_the_hosts(monkeypatch):
    monkeypatch.setenv(RANKS_PER_NODE_ENV, "2")
    assert run_ranks(4, node_layout)[0].nodes == ((0, 1), (2, 3))
    monkeypatch.delenv(RANKS_PER_NODE_ENV)
    assert run_ranks(3, node_layout)[0].nodes == ((0, 1, 2),)  # threads share one host


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text", ["x", "0", "-2"])
def test_a_bad_variable_is_one_line_on_every_rank(monkeypatch, text):
    monkeypatch.setenv(RANKS_PER_NODE_ENV, text)

    def body(comm):
        with pytest.raises(ValueError, match=rf"{RANKS_PER_NODE_ENV} must be one whole number"):
            node_layout(comm)
        return True

    assert run_ranks(2, body) == [True, True]


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("max_lag", 1, "averaged in lockstep"),
        ("sufficient_factors", "on", "it sends whole buckets"),
    ],
)
def test_options_it_cannot_take_are_refused(option, value, says):
    with pytest.raises(ValueError, match=says):
        ExchangeOptions(strategy="gossip-node", **{option: value})


@pytest.mark.timeout(60)
def test_the_topology_schedules_the_nodes(monkeypatch):
    """--topology applies to the nodes: a hypercube of 3 nodes is refused naming them, and
    6 ranks (no power of two) as 2 nodes of 3 take it, and the run reports the nodes'
    topology (the ranks' own schedule, never used to pick partners, is base2)."""

    def build(comm, topology):
        model = torch.nn.Linear(2, 2)
        opt = build_optimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model, comm,
            strategy="gossip-node", topology=topology,
        )  # fmt: skip
        opt.close()
        nodes = opt.mixer.transport.schedule
        return nodes.size, opt.exchange_topology, opt.schedule.topology

    monkeypatch.setenv(RANKS_PER_NODE_ENV, "2")

    def refused(comm):
        with pytest.raises(
            ValueError, match="gossip-node schedules the nodes: --topology hypercube"
        ):
            build(comm, "hypercube")
        return True

    assert run_ranks(6, refused) == [True] * 6
    monkeypatch.setenv(RANKS_PER_NODE_ENV, "3")
    assert run_ranks(6, lambda comm: build(comm, "hypercube")) == [(2, "hypercube", "base2")] * 6
