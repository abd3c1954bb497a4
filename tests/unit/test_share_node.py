"""How a rank fits its share of the node: torch threads and the wait policy (spin or yield);
under a real mpiexec: tests/mpi/test_share_node_mpi.py."""

from __future__ import annotations

import threading

import pytest

from gossipgrad import runtime
from gossipgrad.comm.base import WaitPolicy
from gossipgrad.settings import Settings


def test_ranks_with_a_core_each_spin_in_waits_and_oversubscribed_ones_yield() -> None:
    assert runtime.wait_policy(cores=2, per_node=1, env=Settings()).spin_s == runtime.WAIT_SPIN_S
    assert runtime.wait_policy(cores=2, per_node=2, env=Settings()).spin_s == runtime.WAIT_SPIN_S
    assert runtime.wait_policy(cores=2, per_node=3, env=Settings()).spin_s == 0.0


def test_environment_overrides_and_bad_values_are_named() -> None:
    env = Settings.from_env(
        {
            "GOSSIPGRAD_WAIT_SPIN_S": "0.25",
            "GOSSIPGRAD_PROGRESS_BURST": "4",
            "GOSSIPGRAD_POLL_MAX_PAUSE_S": "0.002",
        }
    )
    assert runtime.wait_policy(cores=2, per_node=8, env=env) == WaitPolicy(0.25, 4, 0.002)
    with pytest.raises(ValueError, match="GOSSIPGRAD_WAIT_SPIN_S='fast'"):
        Settings.from_env({"GOSSIPGRAD_WAIT_SPIN_S": "fast"})
    with pytest.raises(ValueError, match="spin_s >= 0"):
        WaitPolicy(spin_s=-1)


def test_threads_follow_the_share_of_cores_unless_set() -> None:
    assert runtime.torch_threads(cores=8, per_node=2, env=Settings()) == 4
    assert runtime.torch_threads(cores=2, per_node=8, env=Settings()) == 1
    assert runtime.torch_threads(8, 2, Settings.from_env({"OMP_NUM_THREADS": "3"})) == 3
    env = Settings.from_env({"OMP_NUM_THREADS": "3", "GOSSIPGRAD_THREADS": "2"})
    assert runtime.torch_threads(8, 2, env) == 2


def test_background_threads_never_spin() -> None:
    policy = WaitPolicy(spin_s=0.5)
    seen = []
    t = threading.Thread(target=lambda: seen.append(policy.spin_for_this_thread()))
    t.start()
    t.join()
    assert seen == [0.0]
    assert policy.spin_for_this_thread() == 0.5  # pytest runs tests on the main thread
