"""``GOSSIPGRAD_COMM_WAIT=block``: the communication thread waits inside the transport and
the caller sleeps on the bucket's event; results stay exact and a deadline still names the
peer. In-process: requests get a ``block()`` that waits on the thread world, standing in
for ``MPI_Wait`` (the real one is covered by tests/mpi/test_comm_block_mpi.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from commthread_support import GossipExchange, mix_buckets, wait_names_the_silent_peer

from gossipgrad.comm.base import Tag, WaitContext
from gossipgrad.comm.local import run_ranks
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.commthread import CommThread
from gossipgrad.runtime import wait_policy
from gossipgrad.settings import Settings

from launch import JOIN_BYTES


class BlockingRequest:
    """A local request with ``block()``: waits up to ``block_s`` and counts the calls."""

    def __init__(self, inner: Any, ctx: WaitContext, calls: list[int], block_s: float) -> None:
        self.inner, self.ctx, self.calls, self.block_s = inner, ctx, calls, block_s

    def test(self) -> bool:
        return self.inner.test()

    def wait(self, timeout: float) -> None:
        self.inner.wait(timeout)

    def block(self) -> bool:
        self.calls.append(1)
        self.inner.wait(self.block_s)
        return True


class BlockingComm:
    """The local communicator, its point-to-point requests made blockable."""

    def __init__(self, comm: Any, block_s: float = 30.0) -> None:
        self.inner, self.block_s, self.calls = comm, block_s, []

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Any:
        ctx = ctx or WaitContext("received nothing", dst, tag)
        return BlockingRequest(self.inner.isend(buf, dst, tag, ctx), ctx, self.calls, self.block_s)

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Any:
        ctx = ctx or WaitContext("sent nothing", src, tag)
        return BlockingRequest(self.inner.irecv(buf, src, tag, ctx), ctx, self.calls, self.block_s)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("window", [None, 2])
def test_blocking_thread_mixes_every_bucket_exactly(window):
    calls = []

    def body(comm):
        bc = BlockingComm(comm)
        thread = CommThread(GossipExchange(bc, Schedule(comm.size)), 20, window, block=True)
        try:
            mix_buckets(
                thread,
                comm.rank,
                4,
                [50 + i for i in range(6)],
                Tag.PARAM_BUCKET,
                eager=True,
                reverse=False,
            )
        finally:
            thread.close()
        calls.append(len(bc.calls))

    run_ranks(4, body, timeout=40)
    assert sum(calls) > 0, "the thread never blocked: the test exercised polling only"


@pytest.mark.timeout(60)
def test_a_thread_blocked_on_a_silent_peer_lets_the_caller_name_it():
    def body(comm):
        bc = BlockingComm(comm, block_s=3.0)  # the stand-in MPI_Wait returns (raising) at 3 s
        thread = CommThread(GossipExchange(bc, Schedule(2)), timeout=0.5, block=True)
        if comm.rank == 1:  # never sends
            thread.close()
            return
        # within the caller's deadline, not the blocked wait's
        wait_names_the_silent_peer(thread, 5, 7, Tag.PARAM_BUCKET, within_s=2.5)
        assert bc.calls, "the thread was not blocked in the transport"
        time.sleep(3.0)  # the stand-in wait ends; close() then returns
        thread.close()

    run_ranks(2, body, timeout=30)


def test_the_setting_reaches_the_wait_policy():
    assert wait_policy(2, 8, Settings.from_env({"GOSSIPGRAD_COMM_WAIT": "block"})).block
    assert not wait_policy(2, 8, Settings.from_env({})).block
    with pytest.raises(ValueError, match="GOSSIPGRAD_COMM_WAIT='spin': expected poll or block"):
        Settings.from_env({"GOSSIPGRAD_COMM_WAIT": "spin"})


@pytest.mark.timeout(120)
def test_bench_strategies_runs_a_blocking_gossip_beside_the_polling_one():
    from gossipgrad.tools.bench.strategies import run_strategies

    records = run_ranks(
        2,
        lambda comm: run_strategies(
            comm, ["gossip", "gossip@block"], width=32, layers=2, batch=2, steps=2, reps=2
        ),
        timeout=100,
    )
    rows = {r["strategy"]: r for r in records[0]["results"]}
    assert set(rows) == {"gossip", "gossip@block"}
    model = 2 * (32 * 32 + 32) * 4
    for r in rows.values():  # the model, and the join agreement's 3 int64 every 4 steps
        assert 0 < r["posted_bytes_per_step"] - model <= JOIN_BYTES and r["step_s"] > 0, r
    assert rows["gossip"]["posted_bytes_per_step"] == rows["gossip@block"]["posted_bytes_per_step"]
