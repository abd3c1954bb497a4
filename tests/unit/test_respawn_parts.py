"""The pure parts of ``--on-failure respawn``: the survivors' header, who sends a replacement
its state, the state's wire layout, the mirror communicator a replacement builds on, which
kills a replacement skips, who prints the summary, and the options it refuses."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gossipgrad.comm.mirror import MirrorCommunicator
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.statewire import flatten, unflatten
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.membership import check_support, leads
from gossipgrad.engine.run.respawn import Header, donor_of
from gossipgrad.inject.faults import KillSwitch
from gossipgrad.settings import Settings


def test_the_header_goes_through_int64_words_and_back():
    h = Header(step=17, closed=0, saved=-1, reached=18, generation=2, started=5, replaced=(1, 3))
    words = h.words()
    assert words.dtype == np.int64 and words.tolist() == [17, 0, -1, 18, 2, 5, 1, 3]
    assert Header.of(words) == h
    with pytest.raises(ValueError, match="fields and ranks"):
        Header.of(words[:6])  # no replaced rank: not a respawn's header


def test_the_donor_is_the_dead_ranks_last_partner_when_it_lives():
    sched = Schedule(4, "hypercube", seed=0, rotate=True)
    for step in range(1, 9):
        partner = sched.peers(2, step - 1).src
        assert donor_of(2, [0, 1, 3], step, sched) == partner
    # its partner died too: the next live rank after it (wrapping), never a dead one
    partner = sched.peers(2, 4).src
    alive = [r for r in range(4) if r not in (2, partner)]
    assert donor_of(2, alive, 5, sched) == next((r for r in alive if r > 2), alive[0])
    # no schedule (allreduce, local), or step 0: the next live rank
    assert [donor_of(r, [0, 2], 3, None) for r in (1, 3)] == [2, 0]
    with pytest.raises(ValueError, match="no live rank"):
        donor_of(1, [], 3, None)


def test_state_layout_keeps_dtypes_shapes_and_key_types():
    state = {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "h": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "mask": torch.tensor([True, False]),
        "empty": torch.zeros(0, 4),
        "scalar": torch.tensor(3, dtype=torch.int64),
        "np": np.arange(3, dtype=np.int32),
        "state": {0: {"step": 3, "lr": 0.1}, 7: {"inf": math.inf}},
        "misc": [None, "x", (1, 2), True],
    }
    layout, tensors = flatten(state)
    import json

    back = unflatten(json.loads(json.dumps(layout)), tensors)  # JSON on the wire
    assert back["w"].equal(state["w"]) and back["h"].dtype == torch.bfloat16
    assert back["mask"].tolist() == [True, False] and back["empty"].shape == (0, 4)
    assert back["scalar"].shape == () and back["np"].tolist() == [0, 1, 2]
    assert back["state"] == {0: {"step": 3, "lr": 0.1}, 7: {"inf": math.inf}}
    assert back["misc"] == [None, "x", (1, 2), True]
    with pytest.raises(TypeError, match=r"state\.bad: a object cannot be sent"):
        flatten({"bad": object()})


def test_a_mirror_communicator_answers_as_if_every_rank_passed_the_same():
    comm = MirrorCommunicator(rank=1, size=3)
    x = np.array([2.0, 5.0])
    comm.iallreduce_(x).wait(1.0)
    assert x.tolist() == [6.0, 15.0]
    y = torch.tensor([4.0])
    comm.iallreduce_(y, "min").wait(1.0)
    assert y.tolist() == [4.0]
    out = np.zeros(6, dtype=np.int64)
    comm.iallgather(np.array([7, 8]), out).wait(1.0)
    assert out.tolist() == [7, 8, 7, 8, 7, 8]
    assert comm.dup().rank == 1 and comm.split(None) is None and comm.agree(1) == 1
    with pytest.raises(RuntimeError, match="rank 1: a send to rank 0 on a mirror"):
        comm.isend(x, 0, 5)


def test_a_replacement_skips_the_kills_its_launch_rank_already_met():
    env = Settings.from_env({"GOSSIPGRAD_INJECT_KILL": "2:16,2:30,1:16:respawn"})
    assert KillSwitch(2, env).points == {(16, "step"), (30, "step")}
    assert KillSwitch(2, env, after=16).points == {(30, "step")}
    assert KillSwitch(1, env).armed("respawn", 17) and not KillSwitch(1, env).armed("respawn", 15)


def test_the_summary_is_printed_by_the_lowest_launch_rank_alive_replaced_ones_included():
    replaced = {"size_launch": 4, "failures": [{"rank": 0, "replaced": True}]}
    assert [leads(r, replaced) for r in range(4)] == [True, False, False, False]
    again = {"size_launch": 4, "failures": [{"rank": 0, "replaced": True}, {"rank": 0}]}
    assert [leads(r, again) for r in range(4)] == [False, True, False, False]


def test_respawn_is_refused_where_it_cannot_work():
    respawn = TrainConfig.from_flags(on_failure="respawn").run.on_failure
    cannot = SimpleNamespace(size=2, failure_support=lambda: "MPICH has no working ULFM")
    with pytest.raises(ValueError, match="--on-failure respawn needs an MPI with ULFM: MPICH"):
        check_support(respawn, cannot)
    no_spawn = SimpleNamespace(size=2, failure_support=lambda: None)
    with pytest.raises(ValueError, match="cannot start replacements"):
        check_support(respawn, no_spawn)
    for flags, why in [
        ({"strategy": "ddp"}, "strategy ddp cannot"),
        ({"strategy": "horovod"}, "strategy horovod cannot"),
        ({"strategy": "ps"}, "strategy ps cannot"),
        ({"strategy": "gossip-node"}, "its nodes are fixed at start-up"),
        ({"max_lag": 2}, "timing lag:2 cannot follow a membership change"),
    ]:
        with pytest.raises(ValueError, match=f"on_failure='respawn' cannot work: {why}"):
            TrainConfig.from_flags(on_failure="respawn", **flags)
