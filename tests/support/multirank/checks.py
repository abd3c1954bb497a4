"""Check functions that run on any Communicator: in-process (tier 2) and under mpiexec (tier 3).

Each takes ``comm`` and raises AssertionError on failure, or NotApplicable where the check
does not apply to this world (e.g. a hypercube on 3 ranks): the runners report that as a
skip, never as a pass. The same functions are called by tests/inprocess/test_local_world.py (thread
world) and tests/support/multirank/run_checks.py (real MPI, driven by tests/mpi/test_mpi_checks.py).
"""

from __future__ import annotations

import copy
import os

import numpy as np
import torch

from gossipgrad.choices import timeout_hint
from gossipgrad.comm.base import CommTimeout, ReduceOp, Tag
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.nodes import RANKS_PER_NODE_ENV, NodeLayout, NodeTransport, blocks
from gossipgrad.comm.schedule import Schedule, is_power_of_two
from gossipgrad.comm.staging import Stager
from gossipgrad.engine.bucket.mixer import BucketMixer, make_mixer
from gossipgrad.engine.bucket.nodemix import NodeMix
from gossipgrad.engine.bucket.rules import make_rule
from gossipgrad.engine.consensus import average_parameters_, consensus_distance
from gossipgrad.strategies import build_optimizer


class NotApplicable(Exception):  # noqa: N818 - a verdict, not an error
    """The check does not apply to this world; the message says why. Raised alike on every
    rank (the decision depends on ``comm.size`` only), before any communication."""


def require(condition: bool, reason: str) -> None:
    """Raise NotApplicable(``reason``) unless ``condition``."""
    if not condition:
        raise NotApplicable(reason)


def _mix_steps(
    comm, x: torch.Tensor, steps: range, topology: str = "auto", stager: Stager | None = None
) -> torch.Tensor:
    ex = make_mixer("peer", comm, Schedule(comm.size, topology, seed=7), stager)
    for t in steps:
        ex.finish(ex.start(x, 0, t, Tag.GRAD_BUCKET))
    return x


def check_hypercube_cycle_gives_exact_mean(comm) -> None:
    """After one full cycle of hypercube mixing (any cycle, rotated), everyone has the mean."""
    require(
        is_power_of_two(comm.size) and comm.size > 1,
        f"the hypercube needs a power of two >= 2 ranks, not {comm.size}",
    )
    sched = Schedule(comm.size, "hypercube", seed=7)
    for cycle in (0, 1, 3):
        x = torch.full((5,), float(comm.rank), dtype=torch.float64) * (cycle + 1)
        first = cycle * sched.cycle_length
        _mix_steps(comm, x, range(first, first + sched.cycle_length), "hypercube")
        expect = (comm.size - 1) / 2 * (cycle + 1)
        assert torch.all(x == expect), f"rank {comm.rank} cycle {cycle}: {x.tolist()} != {expect}"


def check_one_step_closed_form(comm, stager: Stager | None = None) -> None:
    """x = rank; after step 0 (identity numbering) x = (rank + src) / 2."""
    require(comm.size > 1, "one rank has no peer")
    x = torch.tensor([float(comm.rank)] * 3, dtype=torch.float64)
    _mix_steps(comm, x, range(1), stager=stager)
    src = Schedule(comm.size, "auto", seed=7).peers(comm.rank, 0).src
    assert torch.all(x == (comm.rank + src) / 2), (comm.rank, x.tolist(), src)


def check_mixing_preserves_mean(comm) -> None:
    """Dissemination/hypercube mixing is doubly stochastic: the sum over ranks never moves."""
    gen = torch.Generator().manual_seed(comm.rank)
    x = torch.randn(64, generator=gen, dtype=torch.float64)
    before = allreduce_(comm, x.clone())
    _mix_steps(comm, x, range(13))
    after = allreduce_(comm, x.clone())
    assert torch.allclose(before, after, atol=1e-12), "gossip changed the mean over ranks"


def check_allreduce_exchange_is_mean(comm) -> None:
    x = torch.arange(4, dtype=torch.float64) + comm.rank
    ex = make_mixer("ring", comm, Schedule(comm.size))
    ex.finish(ex.start(x, 0, 0, Tag.GRAD_BUCKET))
    assert torch.allclose(x, torch.arange(4, dtype=torch.float64) + (comm.size - 1) / 2)


def check_consensus_distance(comm) -> None:
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0 + comm.rank)
    mean = 1.0 + (comm.size - 1) / 2
    expect = np.mean([(1.0 + r - mean) ** 2 for r in range(comm.size)]) / mean**2
    got = consensus_distance(model, comm)
    assert abs(got - expect) < 1e-12, (got, expect)
    average_parameters_(model, comm)
    assert consensus_distance(model, comm) < 1e-20


def _train(
    comm,
    overlap: bool,
    mix: str = "grad",
    staleness: int = 0,
    steps: int = 6,
    strategy: str = "gossip",
    barrier: bool = False,
) -> torch.Tensor:
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    # A private generator: in the thread world, torch's global RNG is shared by the ranks,
    # so torch.manual_seed(0) here raced with the other threads' draws and rank 0 (whose
    # parameters are broadcast) could start two runs from different weights.
    init = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=init) * 0.3)
    if strategy == "allreduce" and mix == "param":  # the allreduce that averages parameters
        strategy = "allreduce-param"
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        model,
        comm,
        strategy=strategy,
        mix=mix,
        staleness=staleness,
        bucket_mb=0.0005,
        overlap=overlap,
        seed=3,
    )
    gen = torch.Generator().manual_seed(100 + comm.rank)
    overlapped_params = overlap and mix == "param" and staleness == 0 and opt.communicates
    assert opt.overlap == (overlap and opt.communicates), "overlap was not taken up"
    try:
        for _ in range(steps):
            x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            if barrier:  # a collective of the caller's while buckets are in flight
                comm.barrier()
            if overlapped_params:  # the exchange is left to the next forward's pre-hooks
                assert opt.parameters_in_flight == len(opt.layout.buckets), "not overlapped"
    finally:
        opt.close()
    assert opt.parameters_in_flight == 0
    assert len(opt.layout.buckets) > 1, "the test must exercise several buckets"
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_overlap_is_bit_identical(comm) -> None:
    """Overlapped (hooks + comm thread) and blocking exchange give the same bits."""
    for strategy in ("gossip", "allreduce"):
        a = _train(comm, overlap=True, strategy=strategy)
        b = _train(comm, overlap=False, strategy=strategy)
        assert torch.equal(a, b), f"rank {comm.rank} {strategy}: overlap changed the result"


def check_param_overlap_is_bit_identical(comm) -> None:
    """mix=param: buckets posted after the step and waited for by forward pre-hooks give the
    same bits as mixing every bucket right after the step."""
    for strategy in ("gossip", "allreduce"):
        a = _train(comm, overlap=True, mix="param", strategy=strategy)
        b = _train(comm, overlap=False, mix="param", strategy=strategy)
        assert torch.equal(a, b), f"rank {comm.rank} {strategy}: param overlap changed the result"


def check_stale_overlap_is_bit_identical(comm) -> None:
    """Staleness 1: posting on the communication thread and completing at the next step
    gives the same bits as the blocking path, for both mixes."""
    for strategy in ("gossip", "allreduce"):
        for mix in ("grad", "param"):
            # a barrier after every step: allreduce buckets in flight must not be posted
            # after it on one rank and before it on another (a hang under MPI)
            a = _train(comm, overlap=True, mix=mix, staleness=1, strategy=strategy, barrier=True)
            b = _train(comm, overlap=False, mix=mix, staleness=1, strategy=strategy)
            assert torch.equal(a, b), (
                f"rank {comm.rank} {strategy} {mix}: staleness-1 overlap changed bits"
            )


def check_allreduce_keeps_ranks_identical(comm) -> None:
    w = _train(comm, overlap=True, strategy="allreduce")
    lo, hi = allreduce_(comm, w.clone(), ReduceOp.MIN), allreduce_(comm, w.clone(), ReduceOp.MAX)
    assert torch.equal(lo, hi), "allreduce left ranks with different parameters"


def _least_squares_sgd(
    model: torch.nn.Linear, opt, xs: torch.Tensor, ys: torch.Tensor
) -> torch.Tensor:
    """Steps of ``opt`` on 0.5 * mean ||model(x) - y||^2 over ``zip(xs, ys)``; returns the
    flattened parameters."""
    for x, y in zip(xs, ys, strict=True):
        opt.zero_grad()
        (0.5 * (model(x) - y).pow(2).sum(1).mean()).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_mixing_keeps_the_mean_of_sgd(comm) -> None:
    """Plain SGD (no momentum) on a least-squares loss whose inputs every rank shares, with
    targets that differ by rank: each rank's gradient is affine in its parameters with the
    same Hessian on every rank, so the mean over ranks of the gradients is the gradient of
    the mean targets at the mean parameters. Hence, whatever the ranks' disagreement, the
    mean over ranks of the parameters after k steps equals, exactly, the parameters of one
    SGD run on the mean targets -- when mixing keeps the sum over ranks (doubly
    stochastic: (own + peer) / 2, and staleness 1's zero-sum correction). And mixing must
    have happened: the ranks disagree less than ranks that never mix (whose mean also
    follows the reference)."""
    steps, lr = 8, 0.2
    gen = torch.Generator().manual_seed(11)
    xs = torch.randn(steps, 16, 5, generator=gen, dtype=torch.float64)  # shared inputs
    ys = torch.randn(comm.size, steps, 16, 3, generator=gen, dtype=torch.float64)
    ys += torch.arange(comm.size, dtype=torch.float64).view(-1, 1, 1, 1)  # far apart
    initial = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        for p in initial.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))

    def alone(targets: torch.Tensor) -> torch.Tensor:  # SGD without any communication
        model = copy.deepcopy(initial)
        return _least_squares_sgd(model, torch.optim.SGD(model.parameters(), lr=lr), xs, targets)

    def spread(w: torch.Tensor) -> float:  # sum over ranks of ||w - mean||^2
        mean = allreduce_(comm, w.clone()) / comm.size
        return float(allreduce_(comm, (w - mean).pow(2).sum().reshape(1))[0])

    reference = alone(ys.mean(0))
    spread_alone = spread(alone(ys[comm.rank]))
    for mix, staleness in (("grad", 0), ("param", 0), ("grad", 1), ("param", 1)):
        model = copy.deepcopy(initial)
        opt = build_optimizer(
            torch.optim.SGD(model.parameters(), lr=lr),
            model,
            comm,
            strategy="gossip",
            mix=mix,
            staleness=staleness,
            overlap=False,
            seed=3,
        )
        try:
            w = _least_squares_sgd(model, opt, xs, ys[comm.rank])
        finally:
            opt.close()
        mean = allreduce_(comm, w.clone()) / comm.size
        where = f"rank {comm.rank}, mix {mix}, staleness {staleness}"
        assert torch.allclose(mean, reference, rtol=0, atol=1e-10), (
            f"{where}: mean over ranks {mean.tolist()} != SGD on the mean {reference.tolist()}"
        )
        if comm.size > 1:
            mixed = spread(w)  # a collective: every rank, then assert
            # these mixes leave at most ~0.7 of the unmixed spread (grad, staleness 1, 8
            # ranks); without mixing the ratio is exactly 1
            assert mixed < 0.8 * spread_alone, (
                f"{where}: no mixing? ranks spread {mixed:.4g}, unmixed {spread_alone:.4g}"
            )


def check_deadline_names_peer(comm) -> None:
    """A receive nobody answers fails within the deadline and names the peer and tag."""
    require(comm.size > 1, "one rank has no peer")
    buf = np.zeros(1)
    if comm.rank == 0:
        req = comm.irecv(buf, 1, Tag.GRAD_BUCKET + 2)
        try:
            req.wait(0.3)
        except CommTimeout as exc:
            msg = str(exc)
            assert "peer 1" in msg and "GRAD_BUCKET_2" in msg and timeout_hint() in msg, msg
        else:
            raise AssertionError("wait returned without a message")
    comm.barrier()
    if comm.rank == 1:  # now answer, so the posted receive does not leak into later checks
        comm.isend(np.ones(1), 0, Tag.GRAD_BUCKET + 2).wait(5)
    if comm.rank == 0:
        req.wait(5)
        assert buf[0] == 1.0
    comm.barrier()


def _every_rank(comm, x: torch.Tensor) -> torch.Tensor:
    """Row ``r`` = rank ``r``'s ``x`` (one allreduce)."""
    table = torch.zeros(comm.size, x.numel(), dtype=x.dtype)
    table[comm.rank] = x.reshape(-1)
    return allreduce_(comm, table)


def _same_within_nodes(table: torch.Tensor, nodes: tuple[tuple[int, ...], ...]) -> bool:
    return all(torch.equal(table[m[0]], table[r]) for m in nodes for r in m)


def check_node_gossip_keeps_the_mean_and_nodes_agree(comm) -> None:
    """gossip-node's exchange, at every number of ranks per node that divides the size: the
    sum over ranks never moves, a node's ranks hold the same bits after every step, and
    with a power-of-two number of nodes everyone holds the global mean after log2(nodes)
    steps (through a lossy wire codec, bf16 or fp8 with error feedback, within a quarter
    of where it started, and not the bits float32 gives: the codec is on the wire). 67
    values: shards of unequal length (and empty ones at 1 value). A bucket staged through
    host memory (an MPI that is not CUDA-aware; forced here) gets the same bits."""

    def mixer(layout: NodeLayout, wire: str, stager: Stager | None = None) -> BucketMixer:
        transport, codec, rule = (
            NodeTransport(comm, layout, seed=7, stager=stager),
            make_codec(wire),
            make_rule("average"),
        )
        return BucketMixer(transport, codec, rule, whole=NodeMix(transport, rule, codec))

    for r in [d for d in range(1, comm.size + 1) if comm.size % d == 0]:
        layout = blocks(comm.size, r)
        nodes = len(layout.nodes)
        mean_steps = nodes.bit_length() - 1 if is_power_of_two(nodes) else None
        fp32: dict[int, torch.Tensor] = {}  # numel -> where float32 left it
        for wire in ("fp32", "bf16", "fp8"):
            plain, staged = mixer(layout, wire), mixer(layout, wire, Stager(False, force=True))
            for numel in (67, 1):
                gen = torch.Generator().manual_seed(comm.rank + 31 * numel)
                x = torch.randn(numel, generator=gen, dtype=torch.float64)
                y = x.clone()
                fp32.setdefault(numel, x)
                total = _every_rank(comm, x).sum(0)
                spread = float((x - total / comm.size).abs().max())
                for t in range(6):
                    plain.finish(plain.start(x, 0, t, Tag.PARAM_BUCKET))
                    pending = staged.start(y, 0, t, Tag.PARAM_BUCKET)
                    assert pending.buf is not y, "the staged bucket is a host copy"
                    staged.finish(pending)
                    assert pending.buf is y and torch.equal(x, y), (r, wire, t, "staged")
                    table = _every_rank(comm, x)
                    assert torch.allclose(table.sum(0), total, atol=1e-12), (r, wire, t, "sum")
                    assert _same_within_nodes(table, layout.nodes), (r, wire, t, "a node")
                    if mean_steps is not None and t + 1 >= max(mean_steps, 1):
                        off = (x - total / comm.size).abs().max()
                        bound = 1e-12 if wire == "fp32" else spread / 4
                        assert off <= bound, (r, wire, t, float(off), spread)
                if wire != "fp32" and numel > 1 and nodes > 1:
                    assert not torch.equal(x, fp32[numel]), (r, wire, "no codec on the wire")


def check_node_gossip_trains_alike_overlapped_or_not(comm) -> None:
    """--strategy gossip-node through the optimizer (nodes of 2 ranks where the size is
    even, else one node of every rank): overlapped and blocking give the same bits for
    both mixes and both stalenesses, and at staleness 0 a node's ranks end with the same
    parameters."""
    r = 2 if comm.size % 2 == 0 else comm.size
    os.environ[RANKS_PER_NODE_ENV] = str(r)  # every rank reads it before the layout's allreduce
    try:
        for mix in ("grad", "param"):
            for staleness in (0, 1):
                kw = {"mix": mix, "staleness": staleness, "strategy": "gossip-node"}
                a = _train(comm, overlap=True, barrier=staleness == 1, **kw)
                b = _train(comm, overlap=False, **kw)
                assert torch.equal(a, b), (
                    f"rank {comm.rank} {mix} {staleness}: overlap changed bits"
                )
                if staleness == 0:  # staleness 1 adds last step's correction to each own
                    assert _same_within_nodes(_every_rank(comm, a), blocks(comm.size, r).nodes)
    finally:
        comm.barrier()  # no rank may still be reading it
        os.environ.pop(RANKS_PER_NODE_ENV, None)


# The sizes (up to 8) at which each check does not apply. The runners' tests hold the checks
# to this table, so a check that skipped where it should run would fail, not pass quietly.
SKIPPED_AT: dict[str, frozenset[int]] = {
    "check_hypercube_cycle_gives_exact_mean": frozenset({1, 3, 5, 6, 7}),
    "check_one_step_closed_form": frozenset({1}),
    "check_deadline_names_peer": frozenset({1}),
}


def skipped_at(check, size: int) -> bool:
    """Whether ``check`` is expected to raise NotApplicable on ``size`` ranks."""
    assert size <= 8, "SKIPPED_AT lists sizes up to 8"
    return size in SKIPPED_AT.get(check.__name__, frozenset())


ALL = [
    check_hypercube_cycle_gives_exact_mean,
    check_one_step_closed_form,
    check_mixing_preserves_mean,
    check_allreduce_exchange_is_mean,
    check_consensus_distance,
    check_overlap_is_bit_identical,
    check_param_overlap_is_bit_identical,
    check_stale_overlap_is_bit_identical,
    check_allreduce_keeps_ranks_identical,
    check_mixing_keeps_the_mean_of_sgd,
    check_deadline_names_peer,
    check_node_gossip_keeps_the_mean_and_nodes_agree,
    check_node_gossip_trains_alike_overlapped_or_not,
]
