"""Growing back after a failure in one process (``--on-failure respawn`` on ``LocalWorld``):
the thread world's grow, the state on the wire, the samples redistributed, and the training
loop on survivors plus replacements, including the hostile cases (several deaths, a death
during a respawn, the replacement's own death, a full allocation).

The same under a real ``mpiexec --with-ft ulfm`` is tests/system/test_respawn_mpi.py.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gossipgrad.comm.base import PeerFailed, SpawnRefused
from gossipgrad.comm.local import allreduce_, run_ranks
from gossipgrad.comm.statewire import recv_state, send_state
from gossipgrad.data.sources import TensorSource
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.respawn import rebalance_
from gossipgrad.settings import settings

# --- the thread world's grow -------------------------------------------------------------


def test_survivors_grow_back_to_the_launch_order_and_the_replacement_gets_the_header():
    """Rank 1 of 4 dies; the survivors shrink and grow one replacement with key 1: everyone
    ends up at size 4 in launch order, and the replacement saw the header."""

    def body(comm):
        welcome = getattr(comm, "welcome", None)
        if welcome is not None:  # the replacement: ranked by its key at once
            total = allreduce_(comm, np.array([float(comm.rank)]))[0]
            return ("replacement", comm.rank, comm.size, welcome.tolist(), total)
        if comm.rank == 1:
            comm.die()
        with pytest.raises(PeerFailed):
            allreduce_(comm, np.ones(1))
        new = comm.shrink()
        full = new.grow([1], comm.rank, np.array([42, 7], dtype=np.int64))
        total = allreduce_(full, np.array([float(full.rank)]))[0]
        return ("survivor", full.rank, full.size, None, total)

    results = run_ranks(4, body, timeout=30)
    assert results == [
        ("survivor", 0, 4, None, 6.0),
        ("replacement", 1, 4, [42, 7], 6.0),
        ("survivor", 2, 4, None, 6.0),
        ("survivor", 3, 4, None, 6.0),
    ]


def test_grow_is_refused_on_every_survivor_when_the_world_is_full():
    def body(comm):
        if comm.rank == 2:
            comm.die()
        with pytest.raises(PeerFailed):
            allreduce_(comm, np.ones(1))
        with pytest.raises(SpawnRefused, match="no free slot"):
            comm.shrink().grow([2], comm.rank, np.zeros(1, dtype=np.int64))
        return "refused"

    assert run_ranks(3, body, timeout=30, slots=3) == ["refused", "refused", None]


def test_a_state_goes_over_the_wire_as_bytes_and_comes_back_equal():
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "last": {"top1": 0.5}}

    def body(comm):
        if comm.rank == 0:
            return send_state(comm, state, 1, step=3)
        return recv_state(comm, 0, step=3)

    sent, (got, received) = run_ranks(2, body, timeout=30)
    assert sent == received > 0
    for k, v in state["model"].items():
        assert got["model"][k].equal(v)
    fresh = torch.optim.Adam(torch.nn.Linear(4, 3).parameters())
    fresh.load_state_dict(got["optimizer"])  # a torch optimizer takes it as saved
    assert fresh.state_dict()["state"][0]["exp_avg"].equal(opt.state_dict()["state"][0]["exp_avg"])
    assert got["last"] == {"top1": 0.5}


# --- samples: none lost, none twice ---------------------------------------------------------


def test_rebalance_gives_every_launch_sample_to_exactly_one_rank():
    """Three survivors of four after a half-done shuffle round: rank 1 holds two of rank 0's
    samples (twice), two of its own went nowhere, and rank 2's shard is gone with it; the
    replacement at rank 2 and the duplicate slots get exactly what is missing."""
    sources = [TensorSource("digits", 32, 0, r, 4) for r in range(4)]
    launch = sources[0].launch_ids
    lost_with_rank_2 = sources[2].store.sample_ids()
    s0 = sources[0].store.sample_ids()
    sources[1].refill_(np.array([0, 1]), s0[:2])  # two of rank 1's on no rank, s0[:2] on two

    def body(comm):
        run = SimpleNamespace(source=sources[comm.rank])
        return rebalance_(run, comm, replaced=(2,))

    refilled = run_ranks(4, body, timeout=60)
    assert refilled == [0, 2, len(lost_with_rank_2), 0]  # rank 1's two twice-held slots
    held = np.concatenate([s.store.sample_ids() for s in sources])
    assert np.array_equal(np.sort(held), launch)  # every launch sample exactly once
    x, y = sources[2]._train
    st = sources[2].store.read_all()
    assert torch.equal(st.payload, x[torch.from_numpy(st.ids)].to(st.payload.dtype))
    assert np.array_equal(st.labels, y[torch.from_numpy(st.ids)].numpy())


# --- the training loop ----------------------------------------------------------------------

# Digits, batch 64, 4 ranks: 5 steps per epoch, 359 training samples per rank.
FLAGS = dict(batch_size=64, epochs=3, progress=False, print_freq=1, on_failure="respawn")


def _train(monkeypatch, kill: str, size: int = 4, slots: int | None = None, **flags):
    monkeypatch.setenv("GOSSIPGRAD_INJECT_KILL", kill)
    settings.cache_clear()
    try:
        cfg = TrainConfig.from_flags(**{**FLAGS, **flags})
        return run_ranks(
            size, lambda c: trainer.train(cfg, c), timeout=240, comm_timeout=60, slots=slots
        )
    finally:
        settings.cache_clear()


def _grown_back(results: list, size: int = 4) -> dict:
    """Every launch rank finished (replacements in the dead ranks' places) with the same
    summary at the launch size, nothing lost or held twice, on one model."""

    def timed(key: str) -> bool:  # each rank's own clock
        return key.endswith(("seconds", "_per_s", "_s_per_call"))

    assert all(r is not None for r in results), results
    every = [{k: v for k, v in r.items() if not timed(k)} for r in results]
    assert all(r == every[0] for r in every), f"ranks disagree: {every}"
    s = every[0]
    assert s["steps"] == 15 and s["size_final"] == size and s["size_launch"] == size, s
    assert s["samples_lost"] == 0 and s["samples_twice"] == 0, s
    assert s["test_loss"] < 2.28 and s["consensus_distance"] < 1e-4, s  # as without failures
    for f in s["failures"]:
        assert f["replaced"] and f["samples_lost"] == 0 and f["bytes"] > 100_000, f
        assert f["from"] != f["rank"] and f["size"] == size, f
    return s


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags",
    [
        {},  # gossip, the default mix, lockstep
        {"mix": "grad"},
        {"mix": "param", "staleness": 1},
        {"strategy": "allreduce"},
        {"strategy": "allreduce-param"},
        {"strategy": "local"},
    ],
    ids=["gossip", "gossip-grad", "gossip-param-stale", "allreduce", "allreduce-param", "local"],
)
def test_a_rank_killed_mid_epoch_is_replaced_and_the_job_ends_at_full_size(monkeypatch, flags):
    s = _grown_back(_train(monkeypatch, "2:7", **flags))
    [f] = s["failures"]
    assert f["rank"] == 2 and 7 <= f["step"] <= 8 and f["generation"] == 1, f
    assert f["samples_read_again"] == 359, f  # rank 2's shard, from the dataset


@pytest.mark.timeout(300)
def test_two_ranks_killed_at_one_step_are_both_replaced_in_one_respawn(monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="gossipgrad"):
        s = _grown_back(_train(monkeypatch, "1:7,2:7"))
    assert sorted(f["rank"] for f in s["failures"]) == [1, 2], s
    assert {f["generation"] for f in s["failures"]} == {1}
    assert "launch ranks 1, 2 died; replaced (respawn 1)" in caplog.text


@pytest.mark.timeout(300)
def test_ranks_killed_at_different_steps_are_replaced_one_after_the_other(monkeypatch):
    s = _grown_back(_train(monkeypatch, "1:4,3:9"))
    assert [(f["rank"], f["generation"]) for f in s["failures"]] == [(1, 1), (3, 2)], s


@pytest.mark.timeout(300)
def test_a_replacement_that_dies_is_replaced_in_turn(monkeypatch):
    s = _grown_back(_train(monkeypatch, "2:4,2:11"))
    assert [(f["rank"], f["generation"]) for f in s["failures"]] == [(2, 1), (2, 2)], s
    assert s["failures"][1]["step"] >= 11


@pytest.mark.timeout(300)
def test_a_survivor_killed_during_a_respawn_is_replaced_with_the_first(monkeypatch, caplog):
    """Rank 2 dies at step 7; while its replacement joins, survivor 1 dies: that
    replacement ends, and one respawn brings back both."""
    with caplog.at_level(logging.WARNING, logger="gossipgrad"):
        s = _grown_back(_train(monkeypatch, "2:7,1:7:respawn"))
    assert sorted(f["rank"] for f in s["failures"]) == [1, 2], s
    assert "launch rank 2's replacement: a rank died before it joined" in caplog.text


@pytest.mark.timeout(300)
def test_a_full_allocation_goes_on_shrunk_and_says_so(monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="gossipgrad"):
        results = _train(monkeypatch, "2:7", slots=4)
    assert results[2] is None
    s = results[0]
    assert s["size_final"] == 3 and s["steps"] == 15, s
    assert [(f["rank"], f["replaced"]) for f in s["failures"]] == [(2, False)], s
    assert s["samples_lost"] == 359, s  # as --on-failure continue: its shard
    lines = [r.message for r in caplog.records if "no replacement could start" in r.message]
    assert len(lines) == 1 and "going on at size 3 as --on-failure continue" in lines[0]
