"""Lossy wire codecs and the base2 schedule through the real exchange, in-process: the
checks of tests/support/multirank/codec_checks.py on the thread world at sizes 1-7 (odd ones and
those that are not powers of two included), plus what a codec adds to a checkpoint."""

from __future__ import annotations

import io

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.strategies import build_optimizer

from multirank import codec_checks
from multirank.checks import NotApplicable


@pytest.mark.timeout(240)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("check", codec_checks.ALL, ids=lambda c: c.__name__)
def test_codec_check_in_process(size, check):
    skip = size in codec_checks.SKIPPED_AT.get(check.__name__, frozenset())
    try:
        run_ranks(size, check, timeout=200, comm_timeout=60)
    except NotApplicable as exc:
        assert skip, f"{check.__name__} skipped on {size} ranks: {exc}"
        pytest.skip(f"{check.__name__} on {size} ranks: {exc}")
    assert not skip, f"{check.__name__} ran on {size} ranks, where SKIPPED_AT says it does not"


def _steps(model, opt, comm, first: int, count: int) -> None:
    for t in range(first, first + count):
        gen = torch.Generator().manual_seed(1000 * t + comm.rank)
        opt.zero_grad()
        x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def _resumed(comm, options: dict, keep_residuals: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Eight steps straight, and four + a checkpoint (after a global average, as the trainer
    writes them) + a fresh optimizer that loads it + four: the parameters of both."""

    def build(model):
        sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return build_optimizer(sgd, model, comm, bucket_mb=0.0005, sync="off", **options)

    flat = lambda m: torch.cat([p.detach().reshape(-1) for p in m.parameters()])  # noqa: E731
    model = codec_checks._small_model()
    opt = build(model)
    _steps(model, opt, comm, 0, 4)
    opt.synchronize()
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, buf)
    _steps(model, opt, comm, 4, 4)
    opt.close()
    buf.seek(0)
    saved = torch.load(buf, weights_only=True)
    again = codec_checks._small_model()
    again.load_state_dict(saved["model"])
    opt2 = build(again)
    if not keep_residuals:
        saved["opt"]["gossipgrad"].pop("codec")
    opt2.load_state_dict(saved["opt"])
    _steps(again, opt2, comm, 4, 4)
    opt2.close()
    return flat(model), flat(again)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "options",
    [
        {"wire": "fp8"},
        {"wire": "bf16", "error_feedback": "on", "mix": "grad", "sufficient_factors": "off"},
    ],
    ids=["fp8-param", "bf16-feedback-grad"],
)
def test_error_feedback_residuals_resume_bit_for_bit(options):
    """The residuals are this rank's (``rank_states["codec"]``), saved in the optimizer's
    state dict (``weights_only`` loads it): a resumed run continues bit for bit; dropping
    them changes the result, so the test can tell."""
    for straight, resumed in run_ranks(3, lambda c: _resumed(c, options, True), timeout=100):
        assert torch.equal(straight, resumed)
    results = run_ranks(3, lambda c: _resumed(c, options, False), timeout=100)
    assert any(not torch.equal(a, b) for a, b in results)


def test_a_lossy_codec_is_a_rank_state_of_every_strategy():
    def body(comm):
        states = {}
        for strategy, extra in (("gossip", {}), ("allreduce", {}), ("ps", {})):
            model = codec_checks._small_model()
            opt = build_optimizer(
                torch.optim.SGD(model.parameters(), lr=0.1),
                model,
                comm,
                strategy=strategy,
                wire="fp8",
                **extra,
            )
            states[strategy] = sorted(opt.rank_states)
            opt.close()
        return states

    states = run_ranks(2, body, timeout=60)[0]
    assert states == {
        "gossip": ["codec"],
        "allreduce": ["codec", "codec_factor_matrices"],  # auto: Linear layers start there
        "ps": ["codec_push", "ps"],
    }
