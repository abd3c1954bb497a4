"""Tier 2: sufficient factors on the in-process thread world (the same checks run under
mpiexec in tests/mpi/test_factors_mpi.py), and the pieces that need no communication."""

from __future__ import annotations

import logging

import pytest
import torch

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.bucket.factor_capture import eligible_layers
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.strategies import DistributedOptimizer, build_optimizer

from multirank import factor_checks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("check", factor_checks.ALL, ids=lambda c: c.__name__)
def test_check_in_process(size, check):
    run_ranks(size, check, timeout=90, comm_timeout=30)


def _sgd(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1)


def test_layout_leaves_excluded_weights_out_and_their_grads_unbound():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    w0, w1 = model[0].weight, model[1].weight
    layout = BucketLayout(list(model.parameters()), 1 << 20, frozenset({id(w0), id(w1)}))
    assert [len(b.params) for b in layout.buckets] == [2]  # the two biases, one bucket
    assert layout.nbytes == (8 + 2) * 4
    layout.bind_grads_()
    assert w0.grad is None and w1.grad is None
    everything = BucketLayout(
        list(model.parameters()), 1 << 20, frozenset(id(p) for p in model.parameters())
    )
    assert everything.buckets == [] and everything.nbytes == 0
    with pytest.raises(ValueError, match="no trainable parameters"):
        BucketLayout([torch.nn.Parameter(torch.ones(2), requires_grad=False)], 1 << 20, frozenset())


def test_eligible_layers_are_plain_linear_with_a_weight_of_their_own():
    class Sub(torch.nn.Linear):
        pass

    shared = torch.nn.Linear(3, 3)
    tied = torch.nn.Linear(3, 3)
    other = torch.nn.Module()
    other.weight = tied.weight  # the same weight registered in a second module
    frozen = torch.nn.Linear(3, 3)
    frozen.weight.requires_grad_(False)
    model = torch.nn.ModuleDict(
        {
            "a": shared,
            "b": Sub(3, 3),
            "c": tied,
            "d": other,
            "e": frozen,
            "f": torch.nn.Linear(3, 2, bias=False),
        }
    )
    assert [name for name, _ in eligible_layers(model)] == ["a", "f"]


@pytest.mark.parametrize(
    "kw, reason",
    [
        (dict(mix="param"), "mix='param' averages parameters"),
        (dict(mix="grad", staleness=1), "needs staleness=0"),
        (dict(strategy="local"), "strategy='local' sends none"),
    ],
)
def test_options_without_factors_keep_every_gradient_in_buckets(kw, reason, caplog):
    def body(comm):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        opt = build_optimizer(_sgd(model), model, comm, **kw)
        try:
            return opt.factors, len(opt.layout.buckets[0].params)
        finally:
            opt.close()

    with caplog.at_level(logging.DEBUG, logger="gossipgrad.engine.bucket.factors"):
        results = run_ranks(2, body)
    assert results == [(None, 4), (None, 4)]
    records = [r for r in caplog.records if "sufficient factors" in r.getMessage()]
    assert len(records) == 1 and reason in records[0].getMessage(), records  # once, rank 0
    # the caller never set sufficient_factors: auto's choice is not news at INFO
    assert records[0].levelno == logging.DEBUG


def test_factors_refused_where_asked_are_logged_at_info(caplog):
    def body(comm):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        DistributedOptimizer(_sgd(model), model, comm, mix="grad", sufficient_factors="on")

    with caplog.at_level(logging.INFO, logger="gossipgrad.engine.bucket.factors"):
        run_ranks(1, body)
    [record] = [r for r in caplog.records if "sufficient factors" in r.getMessage()]
    assert record.levelno == logging.INFO and "more than one rank" in record.getMessage()


@pytest.mark.parametrize("bias", [True, False])
def test_gradient_accumulation_with_overlap_is_refused(bias):
    """A second backward pass after the exchanges left: the first hook to see it says so
    (a bias bucket's, or with no bucket at all the factor layer's)."""

    def body(comm):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8, bias), torch.nn.Linear(8, 2, bias))
        opt = build_optimizer(_sgd(model), model, comm, mix="grad", sufficient_factors="on")
        try:
            opt.zero_grad()
            model(torch.ones(2, 4)).sum().backward()
            model(torch.ones(2, 4)).sum().backward()  # the weights' exchanges already left
        finally:
            opt.close()  # with the error propagating: only this rank's threads stop

    match = (
        r"step 0: a backward pass reached gradient bucket 0 after its exchange was posted .*"
        r"backward_passes_per_step=N .*no_sync"
        if bias
        else r"step 0: layer '1' got a second backward pass .*no_sync.*"
        r"overlap=False \(--no-overlap\)"
    )
    with pytest.raises(RuntimeError, match=match):
        run_ranks(2, body, timeout=30)


def test_more_rows_than_agreed_is_an_error_naming_the_layer():
    def body(comm):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
        opt = build_optimizer(
            _sgd(model), model, comm, mix="grad", overlap=False, sufficient_factors="on"
        )
        try:
            for batch in (2, 3):
                opt.zero_grad()
                model(torch.ones(batch, 4)).sum().backward()
                opt.step()
        finally:
            opt.close()

    with pytest.raises(
        RuntimeError,
        match=r"step 1: layer '1' has 3 rows of sufficient "
        r"factors, more than the 2 agreed",
    ):
        run_ranks(2, body, timeout=30)


def test_decision_table_is_logged_once_per_layer_at_debug_and_returned(caplog):
    def body(comm):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 2))
        opt = build_optimizer(_sgd(model), model, comm, mix="grad", strategy="allreduce")
        try:
            assert opt.factor_table is None  # decided at the first step
            opt.zero_grad()
            model(torch.ones(4, 64)).sum().backward()
            opt.step()
            # after the first step the layer sent as a matrix is bucketed again
            w0, w1 = model[0].weight, model[1].weight
            assert opt.factors.weight_ids == {id(w0)}
            bucketed = {id(p) for b in opt.layout.buckets for p in b.params}
            assert id(w1) in bucketed and id(w0) not in bucketed
            assert opt.layout.grads_bound()
            return opt.factor_table
        finally:
            opt.close()

    with caplog.at_level(logging.DEBUG, logger="gossipgrad.engine.bucket.factors"):
        table = run_ranks(4, body)[0]
    # allreduce at 4 ranks: factors iff K (M + N) < 2 M N / 4 -> 4 x 128 < 2048: yes;
    # 4 x 66 = 264 < 64: no
    assert [(r["layer"], r["rows"], r["form"]) for r in table] == [
        ("0", 4, "factors"),
        ("1", 4, "matrix"),
    ]
    assert table[0]["matrix_bytes"] == 2 * 3 / 4 * 64 * 64 * 4
    assert table[0]["factor_bytes"] == 3 * 4 * 128 * 4
    records = [r for r in caplog.records if r.name == "gossipgrad.engine.bucket.factors"]
    lines = [r.getMessage() for r in records]
    assert len(lines) == 3 and "(auto, allreduce, 4 ranks)" in lines[0], lines
    # auto's choice, per layer, is DEBUG (-v): a caller who never set the option is not
    # told at INFO (with "on" it is INFO: tests/mpi/test_factors_mpi.py)
    assert {r.levelno for r in records} == {logging.DEBUG}
    assert lines[1].startswith("  0: K=4 M=64 N=64 matrix") and lines[1].endswith("factors")


def test_train_cli_refuses_a_bad_combination_in_one_line():
    from click.testing import CliRunner

    from gossipgrad.cli import main

    result = CliRunner().invoke(
        main, ["train", "--sufficient-factors", "on", "--strategy", "gossip"]
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "Error: --sufficient-factors on needs --mix grad (--mix param averages parameters, "
        "which have no factors); pass --sufficient-factors auto or off"
    )


def test_a_layer_called_with_a_keyword_input_is_captured_too():
    def body(comm, factors):
        model = torch.nn.Linear(5, 3)
        init = torch.Generator().manual_seed(0)  # private: the thread world shares torch's RNG
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=init))
        opt = build_optimizer(
            _sgd(model), model, comm, mix="grad", overlap=False, sufficient_factors=factors
        )
        gen = torch.Generator().manual_seed(comm.rank)
        try:
            for _ in range(2):
                opt.zero_grad()
                model(input=torch.randn(4, 5, generator=gen)).square().sum().backward()
                opt.step()
            return model.weight.detach().clone(), opt.factor_table
        finally:
            opt.close()

    on, off = run_ranks(3, body, "on"), run_ranks(3, body, "off")
    assert on[0][1][0]["form"] == "factors" and on[0][1][0]["rows"] == 4
    for (a, _), (b, _) in zip(on, off, strict=True):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
