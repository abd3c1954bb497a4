"""The option objects: validated once, at construction, with errors that name the flag;
TrainConfig composes them and round-trips flat option names. Pure: no communication."""

from __future__ import annotations

from pathlib import Path

import pytest

from gossipgrad.choices import use_cli_names
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import (
    DataOptions,
    ExchangeOptions,
    Mix,
    OptimOptions,
    RunOptions,
    ShuffleOptions,
    Topology,
    exchange_options,
)
from gossipgrad.registry import STRATEGIES
from gossipgrad.settings import Settings, table_markdown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("build", "flag"),
    [
        (lambda: ExchangeOptions(strategy="ring"), "--strategy"),
        (lambda: ExchangeOptions(mix="weights"), "--mix"),
        (lambda: ExchangeOptions(topology="torus"), "--topology"),
        (lambda: ExchangeOptions(staleness=2), "--staleness"),
        (lambda: ExchangeOptions(strategy="ddp", staleness=1), "--staleness 1"),
        (lambda: ExchangeOptions(sync_every=-1), "--sync-every"),
        (lambda: ExchangeOptions(bucket_mb=0), "--bucket-mb"),
        (lambda: ExchangeOptions(max_lag=-1), "--max-lag"),
        (lambda: DataOptions(dataset="cifar"), "--dataset"),
        (lambda: DataOptions(batch_size=0), "--batch-size"),
        (lambda: DataOptions(partition="dirichlet:-1"), "--partition"),
        (lambda: ShuffleOptions(shuffle_every=0), "--shuffle-every"),
        (lambda: OptimOptions(lr=0), "--lr"),
        (lambda: OptimOptions(weight_decay=-1), "--weight-decay"),
        (lambda: RunOptions(comm_timeout=0), "--comm-timeout"),
        (lambda: RunOptions(checkpoint_every=5), "--run-dir"),
        (lambda: RunOptions(device="tpu"), "--device"),
        (lambda: TrainConfig(arch="vgg"), "--arch"),
    ],
)
def test_bad_values_name_their_flag(build, flag: str) -> None:
    with pytest.raises(ValueError, match=flag.lstrip("-").replace("-", "_").replace(" ", "=")):
        build()
    use_cli_names()
    try:
        with pytest.raises(ValueError, match=flag):  # the command line's flags
            build()
    finally:
        use_cli_names(False)


def test_strings_become_enums_once_and_overrides_are_validated_again() -> None:
    opts = ExchangeOptions(strategy="allreduce", mix="grad", topology="dissemination")
    assert (opts.strategy, opts.mix, opts.topology) == (
        "allreduce",
        Mix.GRAD,
        Topology.DISSEMINATION,
    )
    assert exchange_options(opts, {"bucket_mb": 4}).bucket_cap_bytes == 4 << 20
    with pytest.raises(ValueError, match="staleness"):
        exchange_options(opts, {"staleness": 3})
    assert exchange_options(None, {}) == ExchangeOptions()


def test_one_default_mix_everywhere_and_allreduce_means_gradient_averaging() -> None:
    """gossip's mix is left open by the options and bound by the optimizer, with one rule
    whatever the entry point: grad under Adam and its kin, param otherwise."""
    assert ExchangeOptions().mix is None
    assert ExchangeOptions().bind(adaptive=False).mix is Mix.PARAM
    assert ExchangeOptions().bind(adaptive=True).mix is Mix.GRAD
    assert TrainConfig().exchange.mix is Mix.PARAM
    assert TrainConfig.from_flags(optimizer="adamw").exchange.mix is Mix.GRAD
    assert TrainConfig.from_flags(optimizer="adamw", mix="param").exchange.mix is Mix.PARAM
    for name in ("allreduce", "horovod", "ddp", "ps"):
        assert ExchangeOptions(strategy=name).mix is Mix.GRAD, name
    assert ExchangeOptions(strategy="allreduce-param").mix is Mix.PARAM
    with pytest.raises(ValueError, match="allreduce-param"):
        ExchangeOptions(strategy="allreduce", mix="param")
    # a new strategy takes its own mix unless one is given
    assert exchange_options(ExchangeOptions(), {"strategy": "allreduce"}).mix is Mix.GRAD
    assert TrainConfig().replace(strategy="allreduce").exchange.mix is Mix.GRAD


def test_ring_allreduce_bytes_are_written_once() -> None:
    spec = STRATEGIES.get
    assert spec("gossip").bytes_per_step(1000, 8) == 1000.0
    for s in ("allreduce", "horovod", "ddp", "ps", "allreduce-param"):
        assert spec(s).bytes_per_step(1000, 8) == pytest.approx(2 * 7 / 8 * 1000)
    assert spec("local").bytes_per_step(1000, 8) == 0.0
    assert spec("gossip").bytes_per_step(1000, 1) == 0


def test_train_config_round_trips_flat_names_and_fingerprints_what_ranks_share() -> None:
    cfg = TrainConfig.from_flags(
        strategy="allreduce", lr=0.05, batch_size=64, shuffle=False, comm_timeout=30.0, seed=3
    )
    flat = cfg.to_dict()
    assert flat["strategy"] == "allreduce" and flat["lr"] == 0.05 and flat["seed"] == 3
    assert TrainConfig.from_flags(**flat) == cfg and cfg.seed == 3
    assert cfg.replace(metrics_out="m.jsonl").fingerprint() == cfg.fingerprint()  # rank-local
    assert cfg.replace(lr=0.1).fingerprint() != cfg.fingerprint()
    with pytest.raises(ValueError, match="unknown option"):
        TrainConfig.from_flags(learning_rate=0.1)


def test_size_dependent_checks_need_the_size() -> None:
    cfg = TrainConfig.from_flags(topology="hypercube")
    cfg.check_size(8)
    with pytest.raises(ValueError, match="power-of-two"):
        cfg.check_size(6)


def test_options_and_settings_are_documented_from_their_tables() -> None:
    """docs/options.md is what ``python scripts/options_table.py`` writes today."""
    import subprocess
    import sys

    code = "import runpy; print(runpy.run_path('scripts/options_table.py')['page'](), end='')"
    page = subprocess.run(  # a fresh interpreter: no toy a test registered lists itself
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert (ROOT / "docs" / "options.md").read_text() == page
    assert table_markdown() in page
    assert Settings.from_env({}) == Settings()


@pytest.mark.parametrize(
    "name", ["gossipgrad.options", "gossipgrad.choices", "gossipgrad.settings"]
)
def test_docstring_examples_hold(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result
