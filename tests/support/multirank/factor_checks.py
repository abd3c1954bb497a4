"""Sufficient-factor checks on any Communicator: in-process (tests/inprocess/test_factors.py)
and under a real mpiexec (tests/mpi/test_factors_mpi.py, through run_checks.py). Each takes
``comm`` and raises AssertionError on failure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.bucket.factors import exchange_factors_
from gossipgrad.strategies import build_optimizer
from gossipgrad.tools.bench.common import CountingCommunicator

RTOL = 1e-5


def _gather(comm, t: torch.Tensor) -> torch.Tensor:
    """Every rank's ``t``, stacked in rank order (a reference computed without factors)."""
    out = torch.empty((comm.size, *t.shape), dtype=t.dtype)
    comm.iallgather(t.contiguous(), out).wait(comm.timeout)
    return out


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def check_iallgather(comm) -> None:
    """Every rank's block in rank order, for numpy arrays and torch tensors."""
    mine = np.arange(3, dtype=np.float64) + 10 * comm.rank
    out = np.empty(3 * comm.size)
    comm.iallgather(mine, out).wait(comm.timeout)
    assert out.tolist() == [10.0 * r + i for r in range(comm.size) for i in range(3)], out
    t = torch.full((2, 2), float(comm.rank), dtype=torch.float32)
    got = _gather(comm, t)
    assert [float(got[r].sum()) for r in range(comm.size)] == [4.0 * r for r in range(comm.size)]


def check_rebuilt_gradient_is_exact(comm) -> None:
    """Factors (two backward passes' worth, padded with zero rows, from a 3-D input) rebuild
    the mixed weight gradient to 1e-5 relative: the mean over ranks (allreduce) and
    (own + src's) / 2 (gossip), at every step of a cycle."""
    gen = torch.Generator().manual_seed(1000 + comm.rank)
    layer = torch.nn.Linear(40, 24)
    xs = [torch.randn(3, 5, 40, generator=gen), torch.randn(4, 40, generator=gen)]
    dys = []
    for x in xs:
        y = layer(x)
        g = torch.randn(y.shape, generator=gen)
        y.backward(g)
        dys.append(g.reshape(-1, 24))
    xs = [x.reshape(-1, 40) for x in xs]
    own = layer.weight.grad.clone()
    every = _gather(comm, own)
    schedule = Schedule(comm.size, "auto", seed=5)
    for strategy in ("allreduce", "gossip"):
        for step in range(max(1, 2 * schedule.cycle_length)):  # two cycles: a rotation too
            grad = own.clone()
            exchange_factors_(comm, strategy, grad, dys, xs, 25, 3, step, schedule)
            if strategy == "allreduce" or comm.size == 1:
                expect = every.mean(0)
            else:  # the schedule's weight (base2: not always 1/2; 0 on an idle step)
                peers = schedule.peers(comm.rank, step)
                expect = (1 - peers.weight) * own + peers.weight * every[peers.src]
            err = _rel(grad, expect)
            assert err < RTOL, f"rank {comm.rank} {strategy} step {step}: relative error {err}"


def _model() -> torch.nn.Module:
    """Linear layers with and without bias, one on a 3-D input (K = batch x 2 positions)."""
    model = torch.nn.Sequential(
        torch.nn.Linear(12, 24),
        torch.nn.Tanh(),
        torch.nn.Linear(24, 24, bias=False),
        torch.nn.Tanh(),
        torch.nn.Flatten(),
        torch.nn.Linear(48, 3),
    )
    init = torch.Generator().manual_seed(0)  # private: the thread world shares torch's RNG
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=init) * 0.3)
    return model


def train(
    comm,
    factors: str,
    strategy: str = "gossip",
    overlap: bool = True,
    steps: int = 5,
    accumulate: int = 1,
    idle_rank: int | None = None,
    on_step: Callable[[int], None] | None = None,
    topology: str = "auto",
) -> tuple[list[torch.Tensor], Any]:
    """Train :func:`_model` with SGD (momentum, weight decay); return the parameters after
    every step and the optimizer (closed). ``idle_rank`` runs no backward at step 1;
    ``on_step(step)`` is called after each step. gossip and allreduce mix gradients; ps
    (which always does) is drained after each step so that the parameters it has pulled by
    the next forward are the ones recorded."""
    model = _model()
    mix = {} if strategy == "ps" else {"mix": "grad"}
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3),
        model,
        comm,
        strategy=strategy,
        overlap=overlap,
        bucket_mb=0.0005,
        seed=3,
        sufficient_factors=factors,
        topology=topology,
        **mix,
    )
    gen = torch.Generator().manual_seed(100 + comm.rank)
    history = []
    try:
        for step in range(steps):
            opt.zero_grad()
            for k in range(accumulate):
                x, y = (
                    torch.randn(4, 2, 12, generator=gen),
                    torch.randint(0, 3, (4,), generator=gen),
                )
                if step == 1 and comm.rank == idle_rank:
                    continue
                # all but the last pass accumulate without posting (DDP's no_sync)
                last = k == accumulate - 1
                with contextlib.nullcontext() if last else opt.no_sync():
                    torch.nn.functional.cross_entropy(model(x), y).backward()
            if opt.factors is not None and opt.overlap and (step, comm.rank) != (1, idle_rank):
                # overlapped: every layer's exchange left during backward, none waits for step()
                assert all(layer.posted for layer in opt.factors.layers), "not overlapped"
            opt.step()
            if strategy == "ps":
                opt.drain()
            history.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
            if on_step is not None:
                on_step(step)
    finally:
        opt.close()
    return history, opt


def _same_trajectory(comm, a: list[torch.Tensor], b: list[torch.Tensor], what: str) -> None:
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert torch.allclose(x, y, rtol=RTOL, atol=1e-6), (
            f"rank {comm.rank} {what}: step {step} differs by {float((x - y).abs().max())}"
        )


def check_gossip_factors_match_buckets(comm) -> None:
    """gossip --mix grad: factors on and off give the same parameters after every step,
    overlapped and blocking; ``auto`` (a mix of factor and matrix layers) as well."""
    off, _ = train(comm, "off")
    for factors in ("on", "auto"):
        for overlap in (True, False):
            on, opt = train(comm, factors, overlap=overlap)
            _same_trajectory(comm, on, off, f"gossip {factors} overlap={overlap}")
            if comm.size == 1:  # one rank exchanges nothing: no factor path at all
                assert opt.factors is None and opt.factor_table is None
            else:
                forms = [r["form"] for r in opt.factor_table]
                expect = ["factors"] * 3 if factors == "on" else ["matrix", "factors", "matrix"]
                assert forms == expect, forms


def check_allreduce_factors_match_buckets(comm) -> None:
    """allreduce: factors on equal factors off to float tolerance, and keep every rank's
    parameters bit-identical (one product of the gathered factors, the same everywhere)."""
    off, _ = train(comm, "off", "allreduce")
    for overlap in (True, False):
        on, _ = train(comm, "on", "allreduce", overlap=overlap)
        _same_trajectory(comm, on, off, f"allreduce overlap={overlap}")
        w = on[-1]
        lo = allreduce_(comm, w.clone(), ReduceOp.MIN)
        hi = allreduce_(comm, w.clone(), ReduceOp.MAX)
        assert torch.equal(lo, hi), "allreduce with factors left ranks with different parameters"


def _bytes_of_step_2(comm, factors: str, strategy: str) -> tuple[float, list[int], Any]:
    """Train 3 steps on a counting communicator; the bytes the third step put on the wire
    (the first agrees on K): isend'ed, plus 2 (p-1)/p of the allreduce buffers, plus p - 1
    times the all-gather blocks. Returns (bytes, [sent, reduced, gathered], optimizer)."""
    p, counter = comm.size, CountingCommunicator(comm)
    counts: list[tuple[int, int, int]] = []

    def count(_step: int) -> None:
        counts.append((counter.sent, counter.reduced, counter.gathered))

    # dissemination: every rank sends at every step, so one step's bytes are the per-step
    # figure (base2 idles some ranks at some steps: codec_checks counts it over a period)
    _, opt = train(counter, factors, strategy, steps=3, on_step=count, topology="dissemination")
    sent, reduced, gathered = (b - a for a, b in zip(counts[1], counts[2], strict=True))
    return sent + reduced * 2 * (p - 1) / p + gathered * (p - 1), [sent, reduced, gathered], opt


def check_ps_factors_match_buckets(comm) -> None:
    """ps with factors on (Poseidon's hybrid: Linear weights all-gathered as factors and
    updated on every rank, the rest through the servers) gives ps's parameters after every
    step to float tolerance, identical on every rank, and sends exactly the bytes it
    reports; ``auto`` leaves ps as it is (its shards are fixed before K is known)."""
    off, _ = train(comm, "off", "ps")
    for factors, overlap in (("on", True), ("on", False), ("auto", True)):
        on, opt = train(comm, factors, "ps", overlap=overlap)
        _same_trajectory(comm, on, off, f"ps {factors} overlap={overlap}")
        lo = allreduce_(comm, on[-1].clone(), ReduceOp.MIN)
        hi = allreduce_(comm, on[-1].clone(), ReduceOp.MAX)
        assert torch.equal(lo, hi), f"ps {factors}: ranks hold different parameters"
        if comm.size == 1 or factors == "auto":
            assert opt.factors is None
            continue
        assert [r["form"] for r in opt.factor_table] == ["factors"] * 3
    if comm.size > 1:
        sent_on, _, opt_on = _bytes_of_step_2(comm, "on", "ps")
        sent_off, _, opt_off = _bytes_of_step_2(comm, "off", "ps")
        for sent, opt in ((sent_on, opt_on), (sent_off, opt_off)):
            mine = opt.bytes_sent_by_rank()[comm.rank]
            assert abs(sent - mine) <= 1e-9 * max(1.0, mine), (sent, mine)
        assert opt_on.layout.nbytes < opt_off.layout.nbytes  # the weights left the servers


def check_accumulation_and_idle_rank(comm) -> None:
    """Two backward passes per step (the first inside ``no_sync()``; factors concatenate
    along K; blocking), and a rank with no backward at one step (its factors are all
    padding), equal the bucket path."""
    for strategy in ("gossip", "allreduce"):
        on, _ = train(comm, "on", strategy, overlap=False, accumulate=2)
        off, _ = train(comm, "off", strategy, overlap=False, accumulate=2)
        _same_trajectory(comm, on, off, f"{strategy} accumulate=2")
        for overlap in (True, False):
            idle = min(1, comm.size - 1)
            on, _ = train(comm, "on", strategy, overlap=overlap, idle_rank=idle)
            off, _ = train(comm, "off", strategy, overlap=overlap, idle_rank=idle)
            _same_trajectory(comm, on, off, f"{strategy} idle rank overlap={overlap}")


def check_bytes_counted_exactly(comm) -> None:
    """``bytes_sent_per_step`` counts both forms exactly: for gossip what ``isend`` was
    handed; for allreduce ``2 (p-1)/p`` of the allreduce buffers plus ``p - 1`` times the
    all-gather blocks."""
    p = comm.size
    for strategy in ("gossip", "allreduce"):
        for factors in ("on", "auto", "off"):
            measured, (sent, reduced, gathered), opt = _bytes_of_step_2(comm, factors, strategy)
            theory = opt.bytes_sent_per_step()
            assert abs(measured - theory) <= 1e-9 * max(1.0, theory), (
                strategy,
                factors,
                measured,
                theory,
            )
            if p == 1:
                assert theory == 0
            elif strategy == "gossip":
                assert reduced == 0 and gathered == 0 and sent > 0
            elif factors == "on":
                assert gathered > 0
            if factors == "off":
                assert gathered == 0


ALL = [
    check_iallgather,
    check_rebuilt_gradient_is_exact,
    check_gossip_factors_match_buckets,
    check_allreduce_factors_match_buckets,
    check_ps_factors_match_buckets,
    check_accumulation_and_idle_rank,
    check_bytes_counted_exactly,
]
