"""A communicator for a rank that builds its parts alone: every other rank mirrors this one.

A replacement rank (``--on-failure respawn``) runs the same construction code as the ranks
it joins, but they are in the middle of training and will not call that code's collectives
with it. So it builds on a :class:`MirrorCommunicator` of its rank and size, whose
collectives complete at once as if every rank had passed what this one passed: an allreduce
SUM of ``x`` gives ``size * x``, MIN and MAX give ``x``, an allgather repeats ``x``, a
broadcast and a barrier change nothing. Checks that compare ranks pass, a broadcast keeps
this rank's values (the state that follows replaces them). Point-to-point messages have no
mirror: they raise.

    >>> import numpy as np
    >>> comm = MirrorCommunicator(rank=2, size=4)
    >>> comm.iallreduce_(x := np.array([3.0])).wait(1.0); x
    array([12.])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gossipgrad.comm.base import ReduceOp, WaitContext, WaitPolicy, check_gather
from gossipgrad.comm.buffers import host_array
from gossipgrad.options import DEFAULT_TIMEOUT_S


class _Done:
    def test(self) -> bool:
        return True

    def wait(self, timeout: float) -> None:
        return None


class MirrorCommunicator:
    """Rank ``rank`` of ``size`` ranks that all do what this one does (no messages)."""

    def __init__(self, rank: int, size: int, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank must be in [0, {size}), got {rank}")
        self.rank, self.size, self.timeout = rank, size, timeout
        self.policy = WaitPolicy()

    def __repr__(self) -> str:
        return f"MirrorCommunicator(rank={self.rank}, size={self.size})"

    def _alone(self, what: str) -> RuntimeError:
        return RuntimeError(
            f"rank {self.rank}: {what} on a mirror communicator (a replacement building its "
            "parts has no peer to message yet)"
        )

    def isend(self, buf: Any, dst: int, tag: int, ctx: WaitContext | None = None) -> Any:
        raise self._alone(f"a send to rank {dst}")

    def irecv(self, buf: Any, src: int, tag: int, ctx: WaitContext | None = None) -> Any:
        raise self._alone(f"a receive from rank {src}")

    def iallreduce_(self, buf: Any, op: ReduceOp = ReduceOp.SUM) -> _Done:
        if ReduceOp(op) is ReduceOp.SUM:
            arr = host_array(buf)
            arr *= self.size
        return _Done()

    def iallgather(self, sendbuf: Any, recvbuf: Any) -> _Done:
        send, out = host_array(sendbuf), host_array(recvbuf)
        check_gather(self, send.nbytes, out.nbytes)
        flat = out.view(np.uint8).reshape(self.size, -1)
        flat[:] = send.view(np.uint8).reshape(1, -1)
        return _Done()

    def bcast_(self, buf: Any, root: int = 0) -> None:
        return None

    def barrier(self) -> None:
        return None

    def dup(self) -> MirrorCommunicator:
        return MirrorCommunicator(self.rank, self.size, self.timeout)

    def split(self, color: int | None) -> MirrorCommunicator | None:
        """Every rank passed ``color``: all of them, in this order (None: no group)."""
        return None if color is None else self.dup()

    def agree(self, flag: int) -> int:
        return flag

    def free(self) -> None:
        return None

    def abort(self, code: int = 1) -> None:
        raise self._alone(f"abort({code})")
