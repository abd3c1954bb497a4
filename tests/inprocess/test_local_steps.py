"""Local steps (``timing="local:H"``) and the outer rule on the thread world: a DiLoCo step
computed by hand at two ranks (over an allreduce and over gossip), the plain average as
the outer rule sgd at lr 1, bf16 rounding the change and not the parameters over an
allreduce, the dense window and the exchange counts."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.strategies import build_optimizer

W0 = [1.0, 2.0]
GRADS = {0: [1.0, 0.0], 1: [0.0, 2.0]}  # each rank's constant gradient


def _linear_job(comm, steps: int, grads: dict, w0=W0, lr: float = 0.1, **options):
    """``steps`` SGD steps of a 2-weight linear model whose gradient on rank r is
    ``grads[r]``; the weights after every step."""
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([w0]))
    opt = build_optimizer(torch.optim.SGD(model.parameters(), lr=lr), model, comm, **options)
    c = torch.tensor([grads[comm.rank % len(grads)]])
    seen = []
    try:
        for _ in range(steps):
            opt.zero_grad()
            model(c).sum().backward()  # d/dw (w . c) = c
            opt.step()
            seen.append(model.weight.detach().reshape(-1).clone())
    finally:
        opt.close()
    return seen, opt


def _diloco_by_hand(rounds: int, lr: float = 0.1, h: int = 2, alpha=0.7, mu=0.9):
    """The two-rank DiLoCo model after each round: inner SGD at ``lr``, H steps, the mean
    of the ranks' models, an outer Nesterov step at ``alpha`` with momentum ``mu``."""
    x = torch.tensor(W0)
    mean_grad = (torch.tensor(GRADS[0]) + torch.tensor(GRADS[1])) / 2
    m = torch.zeros(2)
    out = []
    for _ in range(rounds):
        mixed = x - h * lr * mean_grad  # the mean of x - H lr g_r
        g = x - mixed  # the pseudo-gradient
        m = mu * m + g
        x = x - alpha * (g + mu * m)
        out.append(x.clone())
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("strategy", ["allreduce", "gossip"])
def test_a_two_rank_diloco_step_is_the_hand_computed_one(strategy):
    def body(comm):
        seen, opt = _linear_job(
            comm, 4, GRADS, strategy=strategy, timing="local:2", rule="outer", outer_lr=0.7
        )
        return seen, opt.exchange_stats(0, 4)

    results = run_ranks(2, body, timeout=50)
    expected = _diloco_by_hand(2)
    for rank, (seen, counts) in enumerate(results):
        own = torch.tensor(W0) - 0.1 * torch.tensor(GRADS[rank])  # step 0: local, no exchange
        assert torch.allclose(seen[0], own, atol=1e-6), (rank, seen[0])
        assert torch.allclose(seen[1], expected[0], atol=1e-6), (rank, seen[1], expected[0])
        assert torch.allclose(seen[3], expected[1], atol=1e-6), (rank, seen[3], expected[1])
        assert counts["outer_steps"] == 2 and counts["dense_steps"] == 0
    # the hand computation itself: 0.7 (1 + 0.9) x the first round's change of 0.1 [1, 2]
    assert expected[0].tolist() == pytest.approx([1 - 0.133, 2 - 0.266])


@pytest.mark.timeout(90)
def test_the_plain_average_is_the_outer_rule_sgd_at_lr_1():
    grads = {r: [float(r) - 1.5, 0.5 * r] for r in range(4)}

    def body(comm):
        plain, _ = _linear_job(comm, 9, grads, strategy="gossip", timing="local:3")
        outer, _ = _linear_job(
            comm,
            9,
            grads,
            strategy="gossip",
            timing="local:3",
            rule="outer:sgd",
            outer_lr=1.0,
            outer_momentum=0.0,
        )
        nesterov, _ = _linear_job(comm, 9, grads, strategy="gossip", timing="local:3", rule="outer")
        return plain, outer, nesterov

    for plain, outer, nesterov in run_ranks(4, body, timeout=80):
        for a, b in zip(plain, outer, strict=True):
            assert torch.allclose(a, b, atol=1e-6), (a, b)
        assert not torch.allclose(plain[-1], nesterov[-1], atol=1e-3)  # the test can tell


@pytest.mark.timeout(60)
def test_bf16_rounds_the_change_not_the_parameters_over_an_allreduce():
    """At 100 bf16 holds 0.5 steps: parameters sent as bf16 would lose a change of 0.02;
    the change itself, sent as bf16, keeps it to 3 digits, on every rank alike."""
    grads = {0: [0.1, 0.0], 1: [0.0, 0.1]}

    def body(comm):
        seen, _ = _linear_job(
            comm, 2, grads, w0=[100.0, 100.0], strategy="allreduce", timing="local:2", wire="bf16"
        )
        return seen[-1]

    results = run_ranks(2, body, timeout=50)
    expected = torch.tensor([100.0 - 0.01, 100.0 - 0.01])  # the mean of 2 x 0.1 x 0.1 and 0
    assert torch.equal(results[0], results[1])
    assert torch.allclose(results[0], expected, atol=1e-4), results[0]


@pytest.mark.timeout(60)
def test_a_dense_window_exchanges_every_step_and_is_counted():
    def body(comm):
        model = torch.nn.Linear(2, 1, bias=False)
        opt = build_optimizer(
            torch.optim.SGD(model.parameters(), lr=0.1),
            model,
            comm,
            timing="local:4",
            rule="outer",
            dense_after=0.5,
        )
        c = torch.tensor([GRADS[comm.rank]])
        opt.plan_steps(8)
        seen = []
        try:
            for _ in range(8):
                opt.zero_grad()
                model(c).sum().backward()
                opt.step()
                seen.append(model.weight.detach().reshape(-1).clone())
        finally:
            opt.close()
        return seen, opt.exchange_stats(0, 8), opt.bytes_per_exchange()

    results = run_ranks(2, body, timeout=50)
    (seen0, counts, per), (seen1, _, _) = results
    assert counts == {"outer_steps": 1, "dense_steps": 4, "exchange_bytes": 5 * per}
    assert per == 8.0  # two float32 weights, one peer
    for step in (3, 4, 5, 6, 7):  # the outer step and every dense one: the pair agrees
        assert torch.equal(seen0[step], seen1[step]), step
    assert not torch.equal(seen0[1], seen1[1])  # a local step: each its own


def test_a_dense_window_without_the_runs_length_says_what_to_call():
    def body(comm):
        return _linear_job(comm, 1, GRADS, timing="local:4", dense_before=0.25)

    with pytest.raises(RuntimeError, match="plan_steps"):
        run_ranks(2, body, timeout=30)


@pytest.mark.timeout(60)
def test_the_outer_momentum_is_a_rank_state_and_a_merge_averages_it():
    grads = {r: [float(r), 1.0 - r] for r in range(4)}

    def body(comm):
        seen, opt = _linear_job(comm, 4, grads, timing="local:2", rule="outer")
        momentum = opt.rank_states["outer"].momenta[0].clone()
        opt.synchronize()  # a merge: the models, the anchors and the momentum
        return momentum, opt.rank_states["outer"].momenta[0].clone(), opt.timing.anchors[0]

    results = run_ranks(4, body, timeout=50)
    before = torch.stack([r[0] for r in results])
    assert not torch.allclose(before[0], before[1])  # gossip: each rank its own momentum
    for _, after, anchor in results:
        assert torch.allclose(after, before.mean(0), atol=1e-6)
        assert torch.equal(anchor, results[0][2])  # one model, anchored alike
