"""``--strategy ps`` checks that run on any Communicator: in-process
(tests/inprocess/test_ps.py, the thread world) and under mpiexec (tests/mpi/test_ps_mpi.py,
through run_checks.py).

Each takes ``comm`` and raises AssertionError on failure; each is meaningful at every size,
1 included (one rank is its own server: ps must then be plain SGD).
"""

from __future__ import annotations

import time

import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.offload import HostOffloadOptimizer
from gossipgrad.engine.ps.optimizer import ParameterServerOptimizer
from gossipgrad.strategies import build_optimizer
from gossipgrad.tools.bench.common import CountingCommunicator


def _model(width: int = 16) -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Linear(6, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, width),
        torch.nn.Tanh(),
        torch.nn.Linear(width, 3),
    )
    init = torch.Generator().manual_seed(0)  # private: the thread world shares torch's RNG
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=init) * 0.3)
    return model


def _run(
    comm,
    strategy: str = "ps",
    steps: int = 8,
    slow_s: float = 0.0,
    start: int = 0,
    state: dict | None = None,
    offload: bool = False,
    width: int = 16,
    bucket_mb: float = 0.0005,
    pool_bytes: int | None = None,
    opt_cls: type = torch.optim.SGD,
    **kw,
) -> dict:
    """Train ``steps`` steps (batches of steps ``start``..); returns per-step losses, the
    parameter clocks seen by each forward, the final parameters and the state to resume."""
    model = _model(width)
    sgd = opt_cls(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    opt = build_optimizer(
        HostOffloadOptimizer(sgd) if offload else sgd,
        model,
        comm,
        strategy=strategy,
        bucket_mb=bucket_mb,
        seed=3,
        **kw,
    )
    if pool_bytes is not None:  # before the first step opens the push slots
        opt.server.pool_bytes = pool_bytes
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    clocks: list[int] = []
    if isinstance(opt, ParameterServerOptimizer):  # after opt's pre-hooks: what forward used
        model.register_forward_hook(lambda *_: clocks.append(min(opt.parameter_clocks)))
    losses = []
    try:
        for t in range(start, start + steps):
            gen = torch.Generator().manual_seed(1000 * t + 100 + comm.rank)
            x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
            if slow_s and comm.rank == comm.size - 1:
                time.sleep(slow_s)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(float(loss.detach()))
        opt.synchronize()
        out = {
            "losses": losses,
            "clocks": clocks,
            "opt": opt,
            "w": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
            "state": {
                "model": {k: v.clone() for k, v in model.state_dict().items()},
                "opt": opt.state_dict(),
            },
        }
    finally:
        opt.close()
    return out


def _identical_on_every_rank(comm, w: torch.Tensor) -> bool:
    lo = allreduce_(comm, w.clone(), ReduceOp.MIN)
    hi = allreduce_(comm, w.clone(), ReduceOp.MAX)
    return bool(torch.equal(lo, hi))


def check_ps_lag0_equals_allreduce(comm) -> None:
    """max_lag 0: the same per-step losses and parameters as allreduce-SGD (mix grad), up to
    the order of the float sum (bit-identical in the thread world, which sums in rank order)."""
    ps = _run(comm, "ps", max_lag=0)
    ar = _run(comm, "allreduce", mix="grad")
    assert type(ps["opt"]).__name__ == "ParameterServerOptimizer"
    assert len(ps["opt"].layout.buckets) >= min(comm.size, 3), "too few buckets to shard"
    diff = max(abs(a - b) for a, b in zip(ps["losses"], ar["losses"], strict=True))
    assert diff <= 1e-5, f"rank {comm.rank}: per-step loss differs by {diff}"
    torch.testing.assert_close(ps["w"], ar["w"], rtol=1e-5, atol=1e-6)
    assert ps["clocks"] == list(range(8)), ps["clocks"]  # step t computed on clock t
    assert _identical_on_every_rank(comm, ps["w"])


class _NormSGD(torch.optim.SGD):
    """An optimizer ps does not know to be elementwise (a subclass may read norms)."""


def check_ps_large_buckets_equal_allreduce(comm) -> None:
    """Buckets of ~0.6 MB (MPI's rendezvous protocol, not eager; kept whole by an optimizer
    ps does not split for) and max_lag 1 with them: lag 0 still matches allreduce-SGD and
    lag 1 ends with identical ranks. Split parts of a 2.4 MB weight (0.3 MB and up, also
    past the eager limit) match it too."""
    ps = _run(comm, "ps", steps=4, width=384, bucket_mb=1.0, opt_cls=_NormSGD)
    ar = _run(comm, "allreduce", steps=4, width=384, bucket_mb=1.0, mix="grad")
    assert max(b.nbytes for b in ps["opt"].layout.buckets) > 512 * 1024
    torch.testing.assert_close(ps["w"], ar["w"], rtol=1e-5, atol=1e-6)
    lag1 = _run(comm, "ps", steps=4, width=384, bucket_mb=1.0, max_lag=1, opt_cls=_NormSGD)
    assert _identical_on_every_rank(comm, lag1["w"])
    parts = _run(comm, "ps", steps=3, width=768, bucket_mb=4.0)
    wide = _run(comm, "allreduce", steps=3, width=768, bucket_mb=4.0, mix="grad")
    split = [b.nbytes for b in parts["opt"].layout.buckets if b.span is not None]
    assert (min(split) > 256 * 1024) if comm.size > 1 else not split, split
    torch.testing.assert_close(parts["w"], wide["w"], rtol=1e-5, atol=1e-6)


def check_ps_pushes_received_one_at_a_time_give_the_same_bits(comm) -> None:
    """An owner whose push pool holds one bucket receives the other ranks' pushes one by
    one, summing each before posting the next: with lag 0 the same bits as all at once (the
    sum's order is fixed), with lag 1 identical ranks at the end (which clock a forward uses
    then depends on arrival times); receive memory of one bucket per slot."""
    whole = _run(comm, "ps", max_lag=0, width=64, bucket_mb=0.01)
    single = _run(comm, "ps", max_lag=0, width=64, bucket_mb=0.01, pool_bytes=1)
    assert torch.equal(whole["w"], single["w"]), f"rank {comm.rank}: batches changed the bits"
    assert whole["losses"] == single["losses"]
    lag1 = _run(comm, "ps", max_lag=1, width=64, bucket_mb=0.01, pool_bytes=1)
    assert _identical_on_every_rank(comm, lag1["w"])
    for run, pool in ((whole, max(1, comm.size - 1)), (single, 1), (lag1, 1)):
        slots = [s for ob in run["opt"].server.owned.values() for s in ob.slots if s.pool]
        assert all(len(s.pool) == pool for s in slots), [len(s.pool) for s in slots]
        seen = allreduce_(comm, torch.tensor([float(len(slots))]), ReduceOp.SUM)
        assert seen.item() > 0, "no owner opened a push slot"


def check_ps_splits_a_parameter_larger_than_a_share(comm) -> None:
    """A weight of 85 % of the model is split into parts that different ranks own, so no
    owner serves much more than 1/size of the model; the result is still allreduce-SGD's.
    An optimizer not known to be elementwise keeps it whole, on one owner."""
    ps = _run(comm, "ps", steps=4, width=64, bucket_mb=1.0)
    ar = _run(comm, "allreduce", steps=4, width=64, bucket_mb=1.0, mix="grad")
    torch.testing.assert_close(ps["w"], ar["w"], rtol=1e-5, atol=1e-6)
    opt = ps["opt"]
    big = [b for b in opt.layout.buckets if b.span is not None]
    model_bytes = opt.layout.nbytes
    if comm.size == 1:
        assert not big
    else:
        assert len(big) >= comm.size - 1, [b.span for b in big]  # 85 % in parts <= 1/size
        assert len({opt.owners[b.index] for b in big}) == len(big)  # each on its own rank
        served = max(
            sum(b.nbytes for b in opt.layout.buckets if opt.owners[b.index] == r)
            for r in range(comm.size)
        )
        assert served <= 1.5 * model_bytes / comm.size, (served, model_bytes)
    whole = _run(comm, "ps", steps=4, width=64, bucket_mb=1.0, opt_cls=_NormSGD)
    assert not any(b.span for b in whole["opt"].layout.buckets)
    torch.testing.assert_close(whole["w"], ar["w"], rtol=1e-5, atol=1e-6)
    assert _identical_on_every_rank(comm, ps["w"])


def check_ps_overlap_is_bit_identical(comm) -> None:
    """Pushes from backward hooks and pulls waited for by forward pre-hooks give the bits of
    the blocking path (everything at step()); so does --offload optimizer (host copies)."""
    a = _run(comm, "ps", overlap=True)
    b = _run(comm, "ps", overlap=False)
    c = _run(comm, "ps", overlap=True, offload=True)
    assert a["opt"].overlap == (comm.size > 1)
    assert torch.equal(a["w"], b["w"]), f"rank {comm.rank}: overlap changed the result"
    assert torch.equal(a["w"], c["w"]), f"rank {comm.rank}: host optimizer changed the result"


def check_ps_bytes_are_ring_allreduce(comm) -> None:
    """Counted on the wire: each rank sends what its shard predicts, the mean over ranks is
    2 (size - 1) / size of the model, and the summary figure says so."""
    counter = CountingCommunicator(comm)
    steps = 5
    res = _run(counter, "ps", steps=steps)
    opt = res["opt"]
    model_bytes = opt.layout.nbytes
    # the start-up broadcast and the drains' checks are collectives, not isend
    mine = counter.sent / steps
    assert mine == opt.bytes_sent_by_rank()[comm.rank], (mine, opt.bytes_sent_by_rank())
    total = allreduce_(comm, torch.tensor([counter.sent], dtype=torch.float64))[0] / steps
    assert total == 2 * (comm.size - 1) * model_bytes, (total, model_bytes)
    assert opt.bytes_sent_per_step() == 2 * (comm.size - 1) / comm.size * model_bytes


def check_ps_lag_is_bounded_and_used(comm) -> None:
    """The last rank is slow: with max_lag 2 every forward computes on clock >= step - 2 and
    the others do run ahead of it (some forward on an older clock); with max_lag 0 never."""
    for lag in (0, 2):
        res = _run(comm, "ps", steps=10, slow_s=0.03, max_lag=lag)
        behind = [t - c for t, c in enumerate(res["clocks"])]
        assert all(0 <= d <= lag for d in behind), f"rank {comm.rank} lag {lag}: {behind}"
        assert _identical_on_every_rank(comm, res["w"]), "synchronize left ranks apart"
        used = allreduce_(comm, torch.tensor([max(behind)], dtype=torch.float64), ReduceOp.MAX)
        if lag == 2 and comm.size > 1:
            assert used[0] >= 1, f"no rank ever ran ahead of the slow one: {behind}"


def check_ps_resume_is_exact(comm) -> None:
    """6 steps, each rank's state (model + its shard's optimizer state), a new optimizer that
    loads it, 4 more steps: the bits of 10 steps straight."""
    straight = _run(comm, "ps", steps=10)
    first = _run(comm, "ps", steps=6)
    own = first["state"]["opt"]["gossipgrad"]
    assert "ps" in own and own["step"] == 6
    owned = own["ps"]["buckets"]
    assert owned == [b for b, o in enumerate(first["opt"].owners) if o == comm.rank]
    rest = _run(comm, "ps", steps=4, start=6, state=first["state"])
    assert torch.equal(rest["w"], straight["w"]), f"rank {comm.rank}: resume changed the bits"
    assert rest["losses"] == straight["losses"][6:]


ALL = [
    check_ps_lag0_equals_allreduce,
    check_ps_large_buckets_equal_allreduce,
    check_ps_pushes_received_one_at_a_time_give_the_same_bits,
    check_ps_overlap_is_bit_identical,
    check_ps_splits_a_parameter_larger_than_a_share,
    check_ps_bytes_are_ring_allreduce,
    check_ps_lag_is_bounded_and_used,
    check_ps_resume_is_exact,
]
