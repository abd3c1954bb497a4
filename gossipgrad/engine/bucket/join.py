"""Uneven numbers of steps: ``join()``, and the end-of-run agreement behind ``close()``.

A rank that runs out of data first must keep answering its peers, or they wait for a
message that never comes. A rank in ``join()`` (or ``close()``) therefore takes
*zero-steps*: it exchanges as a step would, contributing no gradient of its own (zeros;
``mix="param"``: its parameters, which keep mixing) and updating nothing, until every rank
has joined. The ranks learn that together from :class:`JoinAgreement`: every ``period``
steps each rank posts one small MAX allreduce on a communicator of its own. A rank still
training completes it one period later (it never waits for it); a rank that has joined
completes it at once, so when every rank has joined they all see it at the same step and
stop there, within ``2 period`` zero-steps of the last rank joining.

``close()`` without ``join()`` runs the same protocol, so an uneven end cannot hang; if a
rank stopped earlier than others that way, every rank then raises an error naming it and
its step (:meth:`JoinAgreement.uneven_message`), instead of a peer's timeout.

    >>> JoinAgreement.decode([0, 40 * 4 + 0, -(37 * 4 + 1)], size=4)
    {'last_rank': 0, 'last_step': 40, 'first_close_rank': 1, 'first_close_step': 37}
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp, Request
from gossipgrad.comm.collectives import wait_collective

JOIN_PERIOD = 4
"""Steps between two join agreements in lockstep (bounded lag: :func:`join_period`)."""

NOBODY = -(2**62)
"""The agreement's value for "no rank closed without join()"."""

GRACE_S = 3.0
"""Seconds a joined rank's wait for the agreement adds to the communication deadline."""


def join_period(agreement: int) -> int:
    """Steps between join agreements, given the timing's steps between stop agreements
    (longer than ranks may be apart under bounded lag).

    >>> join_period(1), join_period(12)
    (4, 12)
    """
    return max(JOIN_PERIOD, agreement)


class JoinAgreement:
    """Whether every rank has joined, agreed every ``period`` steps (collective to build:
    it duplicates ``comm``).

    Call :meth:`after_step` after every step (real or zero) with the steps done, on every
    rank; :meth:`join` when this rank has no more data. ``done`` becomes True on every
    rank at the same step.
    """

    def __init__(self, comm: Communicator, period: int = JOIN_PERIOD) -> None:
        self.comm = comm.dup() if comm.size > 1 else comm
        self.period = period
        self.joined_at: int | None = None
        self.by_close = False
        self.done = False
        self.result: dict[str, int] | None = None
        self._pending: tuple[np.ndarray, Request, int] | None = None

    def join(self, step: int, by_close: bool = False) -> None:
        """This rank has taken ``step`` steps and joins (``by_close``: from ``close()``,
        without ``join()``)."""
        if self.joined_at is None:
            self.joined_at, self.by_close = step, by_close
        if self.comm.size == 1:
            self._finish(self._mine())

    def after_step(self, step: int) -> None:
        """At a multiple of ``period``: complete the agreement posted a period ago, post
        this one, and, once joined, complete it now."""
        if self.comm.size == 1 or self.done or step % self.period:
            return
        self._complete()  # posted while this rank still trained: cannot say "all joined"
        mine = self._mine()
        self._pending = (mine, self.comm.iallreduce_(mine, ReduceOp.MAX), step)
        if self.joined_at is not None:
            self._complete()

    def _mine(self) -> np.ndarray:
        size, rank = self.comm.size, self.comm.rank
        if self.joined_at is None:
            return np.array([1, -1, NOBODY], dtype=np.int64)
        key = self.joined_at * size + rank
        return np.array([0, key, -key if self.by_close else NOBODY], dtype=np.int64)

    def _complete(self) -> None:
        if self._pending is None:
            return
        buf, request, posted = self._pending
        self._pending = None
        what = "the join agreement (every rank calls join() or close() at its end)"
        wait_collective(self.comm, request, what, posted, self.comm.timeout + GRACE_S)
        if buf[0] == 0:
            self._finish(buf)

    def _finish(self, buf: np.ndarray) -> None:
        self.done = True
        self.result = self.decode(buf.tolist(), self.comm.size)

    @staticmethod
    def decode(values: list[int], size: int) -> dict[str, Any]:
        """The agreement's MAX-reduced ``[still training, last join key, -first close
        key]`` (a key is ``steps * size + rank``) as who joined last and who closed first."""
        last_step, last_rank = divmod(int(values[1]), size)
        out = {"last_rank": last_rank, "last_step": last_step}
        if values[2] != NOBODY:
            first_step, first_rank = divmod(-int(values[2]), size)
            out.update(first_close_rank=first_rank, first_close_step=first_step)
        return out

    @property
    def last_rank(self) -> int:
        """The rank that joined last (Horovod's ``join()`` return value)."""
        return self.result["last_rank"] if self.result else self.comm.rank

    def uneven_message(self) -> str | None:
        """After ``done``: the error of an uneven end reached through ``close()`` without
        ``join()`` (None: every rank ended at the same step, or joined on purpose)."""
        r = self.result
        if r is None or "first_close_step" not in r or r["first_close_step"] == r["last_step"]:
            return None
        extra = r["last_step"] - r["first_close_step"]
        return (
            f"rank {self.comm.rank}: ranks ran different numbers of steps: rank "
            f"{r['first_close_rank']} stopped after {r['first_close_step']} steps without "
            f"join() while rank {r['last_rank']} ran {r['last_step']} (its peers mixed "
            f"with a rank that no longer trained for {extra} step{'s' * (extra != 1)}); "
            "give every rank the same number of batches (DistributedSampler(..., "
            "drop_last=True)), or call opt.join() after the training loop on every rank "
            "(gossipgrad.torch: hvd.join())"
        )

    def reset(self) -> None:
        """After ``done`` (every rank at the same step): train on, join again later."""
        self.joined_at, self.by_close, self.done, self.result = None, False, False, None

    def abandon(self) -> None:
        """After a rank died: forget the agreement in flight (its communicator is revoked)."""
        self._pending = None

    def close(self) -> None:
        """Complete the agreement in flight (every rank posted it)."""
        self._complete()
