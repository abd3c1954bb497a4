"""Contenders with settings of their own (``gossip:mix=param``, ``ps:max-lag=1``): parsed,
refused where the strategy does not read them, and run side by side in-process."""

from __future__ import annotations

import gc
import threading
import weakref

import pytest

from gossipgrad.comm.local import run_ranks
from gossipgrad.tools.bench import strategies
from gossipgrad.tools.bench.common import base_strategy, split_settings
from gossipgrad.tools.bench.strategies import run_order, run_strategies, strategy_kwargs
from gossipgrad.tools.bench.tta import TtaOptions


def test_split_settings_reads_each_key_with_its_type():
    assert split_settings("gossip:mix=param:bucket-mb=4") == (
        "gossip",
        {"mix": "param", "bucket_mb": 4.0},
    )
    assert split_settings("ps@block:max-lag=2") == ("ps@block", {"max_lag": 2})
    assert split_settings("allreduce") == ("allreduce", {})
    assert split_settings("gossip:timing=lag:2:wire=bf16") == (
        "gossip",
        {"timing": "lag:2", "wire": "bf16"},
    )
    with pytest.raises(ValueError, match="KEY=VALUE with KEY an exchange option"):
        split_settings("gossip:lr=3")
    with pytest.raises(ValueError, match="staleness='x' is not a value"):
        split_settings("gossip:staleness=x")


def test_a_setting_the_strategy_does_not_read_is_refused():
    assert strategy_kwargs("gossip", "grad", 25.0, True, own={"mix": "param"})["mix"] == "param"
    with pytest.raises(ValueError, match="ddp does not read mix"):
        strategy_kwargs("ddp", "grad", 25.0, True, own={"mix": "param"})
    with pytest.raises(ValueError, match="ddp does not read max_lag"):
        TtaOptions(strategies=("gossip", "ddp:max-lag=1"))


def test_busy_strategies_with_settings_still_run_alone_and_last():
    assert base_strategy("horovod@block:bucket-mb=4+factors") == "horovod"
    names = ["horovod:bucket-mb=4", "gossip", "gossip:mix=param"]
    assert run_order(names, "strategy") == [["gossip", "gossip:mix=param"], names[:1]]


@pytest.mark.timeout(120)
def test_contenders_with_their_own_settings_run_beside_the_launchs():
    def body(comm):
        return run_strategies(
            comm,
            ["gossip", "gossip:mix=param:bucket-mb=0.01", "allreduce:bucket-mb=0.01"],
            width=32,
            layers=2,
            batch=2,
            mix="grad",
            steps=1,
            reps=1,
            warmup=0,
        )

    record = run_ranks(2, body)[0]
    rows = {r["name"]: r for r in record["results"]}
    assert rows["gossip"]["mix"] == "grad" and rows["gossip"]["bucket_mb"] == 25.0
    assert rows["gossip:mix=param:bucket-mb=0.01"]["mix"] == "param"
    assert rows["gossip:mix=param:bucket-mb=0.01"]["bucket_mb"] == 0.01
    assert rows["allreduce:bucket-mb=0.01"]["strategy"] == "allreduce"
    for row in rows.values():  # the process's CPU per step (threads share one process here)
        assert row["cpu_s_per_step"] > 0 and row["cpu_share"] > 0
        assert row["peak_rss_mb"] > 0  # one group here: every row shares one figure
    assert len({row["peak_rss_mb"] for row in rows.values()}) == 1
    assert "mix" not in rows["allreduce:bucket-mb=0.01"]  # allreduce reads no mix
    # every contender sent its model once per step (gossip) or the ring's share (allreduce)
    model = record["model_bytes"]
    assert rows["gossip:mix=param:bucket-mb=0.01"]["theory_bytes_per_step"] == model


@pytest.mark.timeout(120)
def test_together_one_frees_each_contender_before_the_next_is_built(monkeypatch):
    # A weak reference to every contender's model, and, as each contender is built, which
    # models built before it are still alive anywhere in the process: a leak shows as a
    # True, whatever the allocator does with the memory (a process-wide peak would not).
    built: list[weakref.ref] = []
    alive_when_built: dict[str, list[bool]] = {}
    lock = threading.Lock()

    class Watched(strategies.Contender):
        def __init__(self, comm, name, *args, **kwargs):
            with lock:
                alive_when_built.setdefault(name, []).extend(r() is not None for r in built)
            super().__init__(comm, name, *args, **kwargs)
            with lock:
                built.append(weakref.ref(self.trainer.model))

    monkeypatch.setattr(strategies, "Contender", Watched)

    def body(comm):
        return run_strategies(
            comm,
            ["gossip", "allreduce"],
            width=256,
            layers=4,
            batch=2,
            steps=1,
            reps=1,
            warmup=0,
            together="one",
        )

    record = run_ranks(2, body)[0]
    rows = {r["name"]: r for r in record["results"]}
    assert alive_when_built["gossip"] == []  # the first group: nothing built before it
    # each rank saw both gossip models (and a sibling's allreduce if it was built first)
    assert len(alive_when_built["allreduce"]) in (4, 5)
    assert not any(alive_when_built["allreduce"])  # every gossip model was freed first
    gc.collect()  # the last group's are garbage once every rank has returned
    assert all(r() is None for r in built)
    # each group has its own peak figure (one per group, not one per launch)
    assert rows["allreduce"]["peak_rss_mb"] > 0 and rows["gossip"]["peak_rss_mb"] > 0
