"""Bounded-lag gossip (``max_lag >= 1``) checks that run on any Communicator: in-process
(tests/inprocess/test_lagged.py) and under mpiexec (tests/support/multirank/run_lag_checks.py).

Each takes ``comm`` and raises AssertionError on failure. The mean checks use plain SGD
(no momentum) on float64 parameters whose gradient is a constant per rank, so the mean over
ranks after ``synchronize()`` has a closed form: the initial value minus lr x the sum of
every gradient actually computed, over ``size``. A slow rank (it sleeps every step) makes
the lag real: frames arrive late, fast ranks run ahead, the slow rank skips steps.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from gossipgrad.comm.base import ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.bucket.timing.lagged import Lagged, skip_threshold
from gossipgrad.strategies import build_optimizer

LR = 0.125
STEPS = 24


class TwoTensors(torch.nn.Module):
    """Two parameter tensors (two buckets at ``bucket_mb=0.002``), float64."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.linspace(-1, 1, 300, dtype=torch.float64))
        self.b = torch.nn.Parameter(torch.linspace(2, 3, 200, dtype=torch.float64))


def _grad(rank: int, p: torch.Tensor) -> torch.Tensor:
    """Rank r's constant gradient for ``p``: (r + 1) x a fixed pattern."""
    pattern = torch.cos(torch.arange(p.numel(), dtype=torch.float64)).view_as(p)
    return (rank + 1) * pattern


def _lagged(
    comm, mix: str, max_lag: int, staleness: int = 0, overlap: bool = True, wire: str = "fp32"
):
    model = TwoTensors()
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=LR),
        model,
        comm,
        mix=mix,
        max_lag=max_lag,
        staleness=staleness,
        bucket_mb=0.002,
        overlap=overlap,
        seed=5,
        wire=wire,
    )
    assert len(opt.layout.buckets) == 2 and isinstance(opt.timing, Lagged)
    return model, opt


def _run_slow(comm, opt, model, slow_rank: int, pause_s: float, steps: int = STEPS) -> int:
    """``steps`` steps; ``slow_rank`` sleeps ``pause_s`` before each compute; every rank
    skips compute when ``behind()``. Returns the steps this rank computed."""
    computed = 0
    for _ in range(steps):
        if opt.behind():
            opt.skip_step()
            continue
        if comm.rank == slow_rank:
            time.sleep(pause_s)
        opt.zero_grad()
        for p in model.parameters():
            p.grad.add_(_grad(comm.rank, p))
        opt.step()
        computed += 1
    return computed


def _expected_mean(comm, computed: int) -> list[torch.Tensor]:
    """initial - lr x sum over ranks of (steps computed x gradient), over size."""
    counts = np.zeros(comm.size)
    counts[comm.rank] = computed
    allreduce_(comm, counts)
    init = TwoTensors()
    return [
        p.detach() - LR * sum(counts[r] * _grad(r, p) for r in range(comm.size)) / comm.size
        for p in init.parameters()
    ]


def _lag_was_exercised(comm, opt) -> None:
    seen = np.array([opt.timing.max_ahead + opt.timing.waits], dtype=np.float64)
    allreduce_(comm, seen, ReduceOp.MAX)
    assert comm.size == 1 or seen[0] >= 1, "no rank ever saw a peer ahead or waited"


def _mean_is_exact_after_synchronize(
    comm,
    mix: str,
    slow_rank: int,
    settings: tuple[tuple[int, int, bool], ...],
    wire: str = "fp32",
) -> None:
    """For each (max_lag, staleness, overlap): run with ``slow_rank`` slow, then check that
    synchronize() leaves every rank exactly the closed-form mean."""
    if comm.size == 1:
        return
    for max_lag, staleness, overlap in settings:
        model, opt = _lagged(comm, mix, max_lag, staleness, overlap=overlap, wire=wire)
        try:
            computed = _run_slow(comm, opt, model, slow_rank=slow_rank, pause_s=0.02)
            _lag_was_exercised(comm, opt)
            opt.synchronize()
            for p, want in zip(model.parameters(), _expected_mean(comm, computed), strict=True):
                err = float((p.detach() - want).abs().max())
                assert err < 1e-9, (
                    f"rank {comm.rank} {mix} {wire} max_lag {max_lag} staleness "
                    f"{staleness}: mean off by {err}"
                )
        finally:
            opt.close()


def check_lagged_param_mean_is_exact(comm) -> None:
    """Push-sum: after synchronize() every rank holds exactly the mean of a run in which
    each rank applied its own gradients, whatever arrived when (staleness 0 and 1)."""
    _mean_is_exact_after_synchronize(comm, "param", 1, ((2, 0, True), (1, 1, True), (4, 1, True)))


def check_lagged_grad_halves_applied_once(comm) -> None:
    """Grad mix: every gradient's two halves are applied exactly once, so after
    synchronize() (which applies the halves still owed) the mean is the closed form."""
    _mean_is_exact_after_synchronize(
        comm, "grad", comm.size - 1, ((2, 0, True), (3, 0, False), (2, 1, True))
    )


def check_lagged_lossy_mean_is_exact(comm) -> None:
    """A lossy wire (bf16, fp8): each frame carries the decoding of its encoding and the
    sender keeps what it did not send (param: the remainder, deposited into its own model;
    grad: ``g - share q``), so the closed-form mean still holds to float64 rounding, with a
    slow rank, ranks running ahead and skipped steps."""
    for wire in ("bf16", "fp8"):
        _mean_is_exact_after_synchronize(comm, "param", 1, ((2, 0, True), (1, 1, True)), wire)
        _mean_is_exact_after_synchronize(
            comm, "grad", comm.size - 1, ((2, 0, True), (2, 1, False)), wire
        )


def check_fast_rank_waits_only_past_the_bound(comm) -> None:
    """Every rank but 0 sleeps before step K: rank 0 completes steps K .. K+S-1 without
    waiting (it needs frames of steps <= K-1 only), waits at step K+S (it needs the frame
    of step K); and a sleeper whose look-ahead shows rank 0 ahead is ``behind()``."""
    if comm.size == 1:
        return
    S, K, pause = 2, 3, 1.5
    model, opt = _lagged(comm, "param", S)
    try:
        durations = []
        for t in range(K + S + 2):
            if t == K and comm.rank != 0:
                time.sleep(pause)
                sched = Schedule(comm.size, "auto", seed=5)
                watched = range(K + skip_threshold(S), K + S + 1)
                if any(sched.peers(comm.rank, s).src == 0 for s in watched):
                    assert opt.behind(), f"rank {comm.rank}: rank 0 is ahead, not behind()"
            t0 = time.perf_counter()
            opt.zero_grad()
            for p in model.parameters():
                p.grad.add_(_grad(comm.rank, p))
            opt.step()
            durations.append(time.perf_counter() - t0)
        if comm.rank == 0:
            free = max(durations[K : K + S])
            assert free < pause / 2, f"rank 0 waited {free:.2f} s within the lag bound"
            assert durations[K + S] > pause / 2, (
                f"rank 0 did not wait at step {K + S}: {durations[K + S]:.2f} s"
            )
        opt.synchronize()
    finally:
        opt.close()


def check_only_a_slower_rank_skips(comm) -> None:
    """Rank 1 computes fastest, then pauses outside its compute: it is behind but not
    slower, so ``behind()`` is False (the lag bound absorbs a pause). Then its compute
    becomes 5x the others': now it skips to catch up."""
    if comm.size == 1:
        return
    model, opt = _lagged(comm, "param", 2)

    def compute(pause: float) -> None:
        opt.zero_grad()
        time.sleep(pause)
        for p in model.parameters():
            p.grad.add_(_grad(comm.rank, p))
        opt.step()

    try:
        for _ in range(12):  # paces known everywhere (under load too): rank 1's the shortest
            opt.behind()
            compute(0.0 if comm.rank == 1 else 0.02)
        if comm.rank == 1:
            time.sleep(1.0)  # descheduled, say: the others reach the bound meanwhile
            lag = opt.timing
            assert lag.link.ahead(opt.step_count, lag.least_ahead) >= lag.least_ahead
            assert not opt.behind(), f"skips although not slower: {lag.pace} {lag.peer_pace}"
            compute(0.0)
        else:
            opt.behind()
            compute(0.02)
        skipped = 0
        for _ in range(16):
            if opt.behind():
                opt.skip_step()
                skipped += 1
            else:
                compute(0.1 if comm.rank == 1 else 0.02)
        if comm.rank == 1:
            assert skipped >= 1, f"rank 1 is 5x slower and never skipped: {opt.timing.pace}"
        opt.synchronize()
    finally:
        opt.close()


def check_close_leaves_nothing_unmatched(comm) -> None:
    """After close() every receive posted ahead has been matched by an END frame: on the
    in-process world no message is left in a mailbox and no receive is left unmatched (and
    under MPI close returned on every rank)."""
    model, opt = _lagged(comm, "param", 3) if comm.size > 1 else (None, None)
    if opt is None:
        return
    _run_slow(comm, opt, model, slow_rank=0, pause_s=0.005, steps=7)
    opt.close()
    assert opt.timing.link.in_flight == 0, opt.timing.link.in_flight
    comm.barrier()
    world = getattr(comm, "world", None)
    if world is not None:  # LocalWorld: inspect the mailboxes
        left = {k: len(q) for k, q in world.mail.items() if q}
        assert not left, f"messages never received after close: {left}"
        waiting = {k: len(q) for k, q in world.posted.items() if q}
        assert not waiting, f"receives never matched after close: {waiting}"


ALL = [
    check_lagged_param_mean_is_exact,
    check_lagged_grad_halves_applied_once,
    check_lagged_lossy_mean_is_exact,
    check_fast_rank_waits_only_past_the_bound,
    check_only_a_slower_rank_skips,
    check_close_leaves_nothing_unmatched,
]
