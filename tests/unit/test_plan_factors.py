"""Tier 1: the sufficient-factor cost model in closed form, over sizes 1..17 (no MPI)."""

from __future__ import annotations

import doctest
import importlib

import pytest

from gossipgrad.options import ExchangeOptions
from gossipgrad.tools.plan import factors as pf

SIZES = range(1, 18)


@pytest.mark.parametrize("size", SIZES)
def test_bytes_of_both_forms_in_closed_form(size):
    k, m, n, s = 16, 4096, 25088, 4
    assert pf.matrix_bytes("gossip", size, m, n, s) == (0 if size == 1 else m * n * s)
    assert pf.factor_bytes("gossip", size, k, m, n, s) == (0 if size == 1 else k * (m + n) * s)
    assert pf.matrix_bytes("allreduce", size, m, n, s) == pytest.approx(
        2 * (size - 1) / size * m * n * s
    )
    assert pf.factor_bytes("allreduce", size, k, m, n, s) == (size - 1) * k * (m + n) * s
    assert pf.rebuild_flops("gossip", size, k, m, n) == (0 if size == 1 else 2 * k * m * n)
    assert pf.rebuild_flops("allreduce", size, k, m, n) == (
        0 if size == 1 else 2 * size * k * m * n
    )


@pytest.mark.parametrize("size", range(2, 18))
@pytest.mark.parametrize("strategy", ["gossip", "allreduce"])
def test_auto_sends_factors_exactly_below_the_crossover(size, strategy):
    m, n = 300, 500
    k_star = pf.crossover_rows(strategy, size, m, n)
    # closed form: gossip K (M+N) < M N; all-gather (p-1) K (M+N) < 2 (p-1)/p M N
    bound = m * n / (m + n) if strategy == "gossip" else 2 * m * n / (size * (m + n))
    assert k_star < bound <= k_star + 1
    assert pf.decide("auto", strategy, size, k_star, m, n).form == "factors"
    assert pf.decide("auto", strategy, size, k_star + 1, m, n).form == "matrix"
    d = pf.decide("auto", strategy, size, k_star, m, n)
    assert d.factor_bytes < d.matrix_bytes and d.rebuild_flops > 0


def test_modes_and_degenerate_cases():
    assert pf.decide("off", "gossip", 8, 1, 4096, 4096).form == "matrix"
    assert pf.decide("on", "allreduce", 8, 100_000, 10, 10).form == "factors"  # forced
    assert pf.decide("on", "gossip", 8, 0, 10, 10).form == "matrix"  # nothing captured
    assert pf.crossover_rows("gossip", 1, 10, 10) == 0
    d = pf.decide("auto", "allreduce", 8, 16, 4096, 25088)
    assert d.to_json() == {
        "form": "factors",
        "rows": 16,
        "out_features": 4096,
        "in_features": 25088,
        "matrix_bytes": d.matrix_bytes,
        "factor_bytes": d.factor_bytes,
        "rebuild_flops": d.rebuild_flops,
    }
    # the VGG head's first layer at batch 16, 8 ranks: the target is <= 0.25x
    assert d.factor_bytes / d.matrix_bytes < 0.02


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(strategy="local"), "does not exchange sufficient factors"),
        (dict(strategy="horovod"), "does not exchange sufficient factors"),
        (dict(rows=-1), "rows must be an integer >= 0"),
        (dict(size=0), "size must be an integer >= 1"),
        (dict(mode="sometimes"), "unknown sufficient-factors 'sometimes'"),
    ],
)
def test_bad_input_names_what_is_wrong(bad, match):
    args = dict(mode="auto", strategy="gossip", size=4, rows=2, out_features=3, in_features=5)
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        pf.decide(**args)


@pytest.mark.parametrize(
    "flags, match",
    [
        (dict(sufficient_factors="on"), "needs --mix grad"),
        (dict(sufficient_factors="on", mix="grad", staleness=1), "needs --staleness 0"),
        (
            dict(sufficient_factors="on", strategy="local"),
            "--sufficient-factors on does not apply to --strategy local",
        ),
        (dict(sufficient_factors="on", strategy="ddp"), "--sufficient-factors on does not apply"),
        (dict(sufficient_factors="yes"), r"choose one of: auto, on, off"),
    ],
)
def test_bad_combinations_are_one_line_errors(flags, match, cli_names):
    with pytest.raises(ValueError, match=match) as info:
        ExchangeOptions(**flags)
    assert "\n" not in str(info.value)


def test_auto_and_off_are_accepted_everywhere():
    for strategy in ("gossip", "allreduce", "allreduce-param", "local", "ps", "horovod", "ddp"):
        for mode in ("auto", "off"):
            ExchangeOptions(strategy=strategy, sufficient_factors=mode)


@pytest.mark.parametrize(
    "name", ["gossipgrad.tools.plan.factors", "gossipgrad.comm.factors", "gossipgrad.options"]
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
