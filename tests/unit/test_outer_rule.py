"""The outer rule's arithmetic, the local-steps plan, the merge points and their options:
pure, no communicator."""

from __future__ import annotations

import io

import pytest
import torch

from gossipgrad.engine.bucket.outer import Outer
from gossipgrad.engine.bucket.rules import make_rule
from gossipgrad.engine.bucket.timing.local import LocalPlan
from gossipgrad.engine.run.merge import Merges, ring_bytes
from gossipgrad.options import ExchangeOptions, RunOptions


def _mixed_models(rounds: int, seed: int = 0, n: int = 5) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(n, generator=gen) for _ in range(rounds)]


@pytest.mark.parametrize(("kind", "momentum"), [("sgd", 0.0), ("sgd", 0.9), ("nesterov", 0.9)])
def test_the_outer_step_is_torchs_sgd_on_the_pseudo_gradient(kind, momentum):
    """Each round, torch's SGD (its Nesterov form too) stepping from the anchor with
    ``anchor - mixed`` as the gradient gives the rule's new model."""
    rule = Outer(kind, lr=0.7, momentum=momentum)
    ref = torch.zeros(5, requires_grad=True)
    sgd = torch.optim.SGD([ref], lr=0.7, momentum=momentum, nesterov=kind == "nesterov")
    anchor = torch.randn(5, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        ref.copy_(anchor)
    for mixed in _mixed_models(4):
        ref.grad = anchor - mixed
        sgd.step()
        out = mixed.clone()
        rule.outer_(0, anchor, out)
        assert torch.allclose(out, ref.detach(), atol=1e-6), (out, ref)
        anchor = out


def test_nesterov_by_hand():
    """Two rounds whose mixed model lies 1 below the anchor: g = 1 both times; m = 1 then
    1.9; steps (1 + 0.9 x 1) and (1 + 0.9 x 1.9), times the learning rate 0.5."""
    rule = Outer("nesterov", lr=0.5, momentum=0.9)
    anchor = torch.tensor([10.0])
    mixed = anchor - 1
    rule.outer_(0, anchor, mixed)
    assert mixed.item() == pytest.approx(10 - 0.5 * 1.9)
    anchor = mixed.clone()
    mixed = anchor - 1
    rule.outer_(0, anchor, mixed)
    assert mixed.item() == pytest.approx(10 - 0.95 - 0.5 * (1 + 0.9 * 1.9))


def test_sgd_at_lr_1_without_momentum_is_the_mixed_model():
    rule = Outer("sgd", lr=1.0, momentum=0.0)
    anchor = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    for mixed in _mixed_models(3, seed=2, n=1000):
        want = mixed.clone()
        rule.outer_(0, anchor, mixed)
        assert torch.allclose(mixed, want, atol=1e-6)
    assert rule.momenta == {}  # no state without momentum


def test_momentum_is_per_bucket_and_survives_a_checkpoint():
    rule = Outer("nesterov", lr=0.7, momentum=0.9)
    for index in (0, 1):
        rule.outer_(index, torch.ones(3) * index, torch.zeros(3))
    buf = io.BytesIO()
    torch.save(rule.state_dict(), buf)
    buf.seek(0)
    other = Outer("nesterov", lr=0.7, momentum=0.9)
    other.load_state_dict(torch.load(buf, weights_only=True))
    assert sorted(other.momenta) == [0, 1]
    assert torch.equal(other.momenta[1], torch.ones(3)) and other.state_values() == 6
    with pytest.raises(ValueError, match="resume with the same --rule"):
        Outer("sgd").load_state_dict(rule.state_dict())


def test_the_rule_reads_its_options_when_bound():
    opts = ExchangeOptions(timing="local:5", rule="outer:sgd", outer_lr=0.3, outer_momentum=0.5)
    rule = make_rule(opts.rule, opts)
    assert (rule.kind, rule.lr, rule.momentum) == ("sgd", 0.3, 0.5)
    assert make_rule("average", opts).outer is False
    with pytest.raises(ValueError, match="outer:adam"):
        make_rule("outer:adam")


def _brute(plan: LocalPlan, start: int, end: int) -> dict[str, int]:
    kinds = [plan.kind(t) for t in range(start, end)]
    return {"outer_steps": kinds.count("outer"), "dense_steps": kinds.count("dense")}


@pytest.mark.parametrize("every", [1, 3, 10])
@pytest.mark.parametrize("window", [(0.0, 1.0), (0.0, 0.8), (0.2, 1.0), (0.25, 0.5)])
@pytest.mark.parametrize("total", [7, 40, 101])
def test_the_plans_counts_are_its_kinds(every, window, total):
    plan = LocalPlan(every, *window, total=total)
    for start in range(0, total + 1, 3):
        for end in range(start, total + 1, 5):
            assert plan.counts(start, end) == _brute(plan, start, end), (start, end)
    rounds = [plan.rounds_before(t) for t in range(total) if plan.kind(t)]
    assert rounds == list(range(len(rounds)))  # consecutive exchanges walk the schedule


def test_a_late_and_an_early_window_of_one_length_cost_the_same():
    late, early = LocalPlan(10, 0.0, 0.8, total=300), LocalPlan(10, 0.2, 1.0, total=300)
    assert sum(late.counts(0, 300).values()) == sum(early.counts(0, 300).values()) == 84
    assert late.kind(239) == "outer" and late.kind(240) == "dense" and early.kind(60) is None


def test_the_merge_points():
    end = Merges(("end",))
    assert (end.at_eval(False), end.at_eval(True), end.own_first(True)) == (False, True, True)
    default = Merges(RunOptions().merge_at)
    assert default.at_eval(False) and default.at_checkpoint and not default.own_first(True)
    assert not Merges(()).at_eval(True)
    assert ring_bytes(1000, 8) == 2 * 7 / 8 * 1000 * 8 and ring_bytes(1000, 1) == 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timing": "local:10", "mix": "grad"}, "drop mix"),
        ({"rule": "outer"}, "needs timing='local:H'"),
        ({"outer_lr": 0.5}, "is the outer rule's"),
        ({"dense_after": 0.8}, "needs timing='local:H'"),
        ({"timing": "local:4", "max_lag": 2}, "drop max_lag=2"),
        ({"timing": "local:4", "staleness": 1}, "drop staleness=1"),
        ({"timing": "local:x"}, "local takes H >= 1"),
        ({"timing": "local:4", "dense_before": 0.5, "dense_after": 0.4}, "would overlap"),
        ({"timing": "local:4", "rule": "outer", "outer_momentum": 1.0}, "must be < 1"),
        ({"strategy": "ddp", "timing": "local:4"}, "does not apply to strategy='ddp'"),
    ],
)
def test_what_does_not_fit_is_refused_in_one_line(options, message):
    with pytest.raises(ValueError, match=message) as err:
        ExchangeOptions(**options)
    assert "\n" not in str(err.value)


def test_local_steps_move_parameters_under_every_bucket_strategy():
    for strategy in ("gossip", "allreduce", "local"):
        opts = ExchangeOptions(strategy=strategy, timing="local:10", rule="outer")
        assert opts.mix == "param" and opts.timing == "local:10"
    assert ExchangeOptions(timing="local:10").bind(adaptive=True).mix == "param"


def test_merging_only_at_the_end_is_refused_with_a_run_dir():
    with pytest.raises(ValueError, match="add checkpoint to merge_at"):
        RunOptions(merge_at="end", run_dir="runs/x")
    assert RunOptions(merge_at="none").merge_at == ()
    with pytest.raises(ValueError, match="choose one of: end, eval, checkpoint"):
        RunOptions(merge_at="final")
