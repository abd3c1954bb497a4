"""The flat bucket layout: grouping, and the parts a parameter server splits a large
parameter into (each a slice of one flat buffer, so ``p.grad`` and ``p.data`` stay views)."""

from __future__ import annotations

import pytest
import torch

from gossipgrad.engine.buckets import BucketLayout


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Linear(8, 100), torch.nn.Linear(100, 2)
    )


def test_without_split_a_large_parameter_keeps_a_bucket_of_its_own():
    model = _model()
    layout = BucketLayout(list(model.parameters()), cap_bytes=1000)
    big = model[1].weight  # 800 values, 3200 bytes
    holding = [b for b in layout.buckets if any(p is big for p in b.params)]
    assert len(holding) == 1 and holding[0].numel == 800 and holding[0].span is None


def test_split_parts_cover_the_parameter_once_and_stay_views():
    model = _model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    layout = BucketLayout(list(model.parameters()), cap_bytes=1000, split=True)
    big = model[1].weight
    parts = [b for b in layout.buckets if b.span is not None and b.params[0] is big]
    assert len(parts) == 4  # 3200 bytes in parts of <= 1000
    assert [b.span for b in parts] == [(0, 200), (200, 400), (400, 600), (600, 800)]
    assert all(b.nbytes <= 1000 for b in layout.buckets)
    other = model[2].weight  # 200 values, 800 bytes: fits, stays whole
    assert all(b.span is None for b in layout.buckets if any(p is other for p in b.params))
    assert layout.buckets_of()[id(big)] == [b.index for b in parts]
    layout.bind_grads_()
    layout.bind_params_()
    assert layout.grads_bound()
    for name, p in model.named_parameters():
        assert torch.equal(p.detach(), before[name]), name  # values moved, not changed
    for b in parts:  # the parts are the parameter's own memory, in order
        lo, hi = b.span
        b.grads.fill_(float(lo))
        assert torch.equal(b.values, big.detach().reshape(-1)[lo:hi])
    assert big.grad.is_contiguous() and big.grad.shape == big.shape
    assert torch.equal(big.grad.reshape(-1)[::200], torch.tensor([0.0, 200.0, 400.0, 600.0]))
    big.grad = torch.zeros_like(big)  # detached from the buckets
    assert not layout.grads_bound()


@pytest.mark.parametrize("numel,cap,expected", [(10, 4, 10), (7, 100, 1), (3, 1, 3)])
def test_split_never_makes_an_empty_part(numel, cap, expected):
    p = torch.nn.Parameter(torch.zeros(numel))
    layout = BucketLayout([p], cap_bytes=cap, split=True)
    assert len(layout.buckets) == expected
    assert sum(b.numel for b in layout.buckets) == numel
    assert all(b.numel >= 1 for b in layout.buckets)


def test_the_standin_optimizer_splits_as_the_one_it_stands_for():
    """ps splits a large parameter on the stand-in device exactly when it would with the
    optimizer the stand-in's stands for (SGD: yes; a subclass that declares nothing: no)."""
    from gossipgrad.engine.optim import rebuild, updates_elementwise
    from gossipgrad.tools.devices.optimizer import standin_optimizer
    from gossipgrad.tools.devices.profile import StandinProfile

    class Normed(torch.optim.SGD):
        pass

    profile = StandinProfile.load("googlenet-p100pcie-fp32-b128")
    w = [torch.nn.Parameter(torch.zeros(3))]
    sgd = standin_optimizer(None, profile, 1.0, torch.optim.SGD(w, lr=0.1))
    assert updates_elementwise(sgd)
    assert updates_elementwise(rebuild(sgd, [{"params": w}]))  # as ps rebuilds it per bucket
    assert not updates_elementwise(standin_optimizer(None, profile, 1.0, Normed(w, lr=0.1)))
