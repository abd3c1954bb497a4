"""The communication thread on the in-process world: completion, deadlines, errors."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from commthread_support import GossipExchange, mix_buckets, wait_names_the_silent_peer

from gossipgrad.comm.base import CommTimeout, Tag
from gossipgrad.comm.local import run_ranks
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.commthread import CommThread


@pytest.mark.timeout(60)
@pytest.mark.parametrize("eager", [True, False])
def test_many_buckets_finish_whoever_polls(eager):
    """Buckets posted eagerly or by the thread, waited for in any order, all mix right."""

    def body(comm):
        thread = CommThread(GossipExchange(comm, Schedule(comm.size)), 20)
        try:
            mix_buckets(
                thread,
                comm.rank,
                5,
                [100 + i for i in range(7)],
                Tag.GRAD_BUCKET,
                eager,
                reverse=True,
            )
        finally:
            thread.close()

    run_ranks(4, body, timeout=40)


@pytest.mark.timeout(30)
def test_a_silent_peer_fails_the_wait_naming_it():
    def body(comm):
        thread = CommThread(GossipExchange(comm, Schedule(2)), timeout=0.5)
        try:
            if comm.rank == 0:  # rank 1 never sends
                wait_names_the_silent_peer(thread, 3, 0, Tag.GRAD_BUCKET, within_s=5)
        finally:
            thread.close()

    run_ranks(2, body, timeout=20)


@pytest.mark.timeout(30)
def test_an_error_while_mixing_reaches_the_waiter():
    class Broken(GossipExchange):
        def finish(self, pending: Pending) -> None:
            raise RuntimeError("mix failed")

    def body(comm):
        thread = CommThread(Broken(comm, Schedule(2)), timeout=5)
        buf = torch.zeros(4)
        try:
            thread.submit(0, lambda: thread.exchange.start(buf, 0, 0, Tag.GRAD_BUCKET), eager=True)
            with pytest.raises(RuntimeError, match="mix failed"):
                thread.wait(0)
        finally:
            thread.close()

    run_ranks(2, body, timeout=20)


@pytest.mark.timeout(60)
def test_window_keeps_at_most_that_many_on_the_wire_in_submission_order():
    seen: list[tuple[int, int, int]] = []  # (rank, key, exchanges in flight when posted)

    class Recording(GossipExchange):
        def start(self, buf, index, step, tag):
            seen.append((self.comm.rank, index, len(thread_of[self.comm.rank]._inflight)))
            return super().start(buf, index, step, tag)

    thread_of = {}

    def body(comm):
        thread = thread_of[comm.rank] = CommThread(
            Recording(comm, Schedule(comm.size)), 20, window=2
        )
        try:
            bufs = [torch.full((1000,), float(comm.rank)) for _ in range(6)]
            for i, b in enumerate(bufs):
                thread.submit(
                    i,
                    lambda b=b, i=i: thread.exchange.start(b, i, 0, Tag.PARAM_BUCKET + i),
                    eager=True,
                )
            for i in range(6):
                thread.wait(i)
            src = thread.exchange.transport.schedule.peers(comm.rank, 0).src
            assert all(torch.all(b == (comm.rank + src) / 2) for b in bufs)
        finally:
            thread.close()

    run_ranks(2, body, timeout=40)
    for rank in (0, 1):
        mine = [(key, n) for r, key, n in seen if r == rank]
        assert [key for key, _ in mine] == list(range(6))
        assert max(n for _, n in mine) <= 1, mine  # at most 1 other in flight: window 2
    with pytest.raises(ValueError, match="window"):
        CommThread(None, 1, window=0)


@pytest.mark.timeout(60)
def test_a_wait_past_its_deadline_names_rank_step_peer_and_tag():
    """Window 1: bucket 1 goes on the wire only when bucket 0 completes, late, so the wait
    for it expires (after timeout + 1 s) before the bucket's own deadline (timeout after it
    was posted): the wait's message must still name the peer, step and tag it waits for."""
    timeout = 4.0

    def body(comm):
        thread = CommThread(GossipExchange(comm, Schedule(2)), timeout, window=1)
        bufs = [torch.zeros(4), torch.zeros(4)]
        try:
            if comm.rank == 0:
                for i, b in enumerate(bufs):
                    thread.submit(
                        i,
                        lambda b=b, i=i: thread.exchange.start(b, i, 0, Tag.GRAD_BUCKET + i),
                        eager=True,
                    )
                t0 = time.monotonic()
                with pytest.raises(
                    CommTimeout,
                    match=r"rank 0, step 0: peer 1 sent nothing "
                    r".*\(tag GRAD_BUCKET_1\)",
                ):
                    thread.wait(1)
                assert time.monotonic() - t0 < timeout + 1.0 + 2.0
            else:  # answers bucket 0 halfway into the deadline, never bucket 1
                time.sleep(timeout / 2 + 0.5)
                ex = thread.exchange
                ex.finish(ex.start(bufs[0], 0, 0, Tag.GRAD_BUCKET))
        finally:
            thread.close()

    run_ranks(2, body, timeout=40)


@pytest.mark.timeout(60)
def test_close_raises_naming_the_rank_when_the_thread_does_not_end():
    entered, release = threading.Event(), threading.Event()

    class Stuck(GossipExchange):
        def start(self, buf, index, step, tag):
            return Pending(buf)  # nothing to wait for: finished by the thread at once

        def finish(self, pending: Pending) -> None:
            entered.set()
            release.wait(30)  # stands for an MPI call that never returns

    def body(comm):
        if comm.rank == 0:
            return
        thread = CommThread(Stuck(comm, Schedule(2)), timeout=0.5)
        try:
            thread.submit(0, lambda: thread.exchange.start(torch.zeros(4), 0, 0, 0))
            assert entered.wait(10), "the thread never ran finish"
            with pytest.raises(
                RuntimeError,
                match=r"rank 1: communication thread "
                r".* did not stop within 5.5 s",
            ):
                thread.close()
        finally:
            release.set()
            thread.close()

    run_ranks(2, body, timeout=40)
