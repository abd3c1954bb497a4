"""Helpers shared by the communication thread's tests (tests/inprocess/test_commthread.py,
test_comm_block.py): gossip's bucket exchange as the optimizer builds it, one step pattern
checked against the exact mean, and a wait on a silent peer that must name it."""

from __future__ import annotations

import time

import pytest
import torch

from gossipgrad.comm.base import CommTimeout, Tag
from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.transport import PeerTransport
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.rules import Average


class GossipExchange(BucketMixer):
    """Gossip's bucket exchange as the optimizer builds it: to the peer, fp32, averaged."""

    def __init__(self, comm, schedule, stager=None) -> None:
        super().__init__(PeerTransport(comm, schedule, stager), Codec(), Average())


def mix_buckets(
    thread, rank: int, steps: int, sizes: list[int], tag: int, eager: bool, reverse: bool
) -> None:
    """Submit one bucket per size each step, wait for all (last first when ``reverse``) and
    check each holds the mean with this step's partner. New tensors each step, with
    step-dependent values: a send from a stale (cached) view of last step's would show."""
    for step in range(steps):
        bufs = [torch.full((n,), float(rank + i + 10 * step)) for i, n in enumerate(sizes)]
        for i, b in enumerate(bufs):
            thread.submit(
                i, lambda b=b, i=i, s=step: thread.exchange.start(b, i, s, tag + i), eager=eager
            )
        for i in reversed(range(len(bufs))) if reverse else range(len(bufs)):
            thread.wait(i)
        src = thread.exchange.transport.schedule.peers(rank, step).src
        for i, b in enumerate(bufs):
            assert torch.all(b == (rank + src) / 2 + i + 10 * step), (step, i, b[:3])


def wait_names_the_silent_peer(thread, index: int, step: int, tag: Tag, within_s: float):
    """On rank 0 of 2 whose peer never sends: post bucket ``index`` at ``step``; the wait
    must fail within ``within_s`` naming peer 1, the step and the bucket's tag."""
    buf = torch.zeros(4)
    thread.submit(index, lambda: thread.exchange.start(buf, index, step, tag + index), eager=True)
    t0 = time.monotonic()
    with pytest.raises(
        CommTimeout,
        match=rf"rank 0, step {step}: peer 1 sent nothing "
        rf".*{tag.name}_{index}",
    ):
        thread.wait(index)
    assert time.monotonic() - t0 < within_s
