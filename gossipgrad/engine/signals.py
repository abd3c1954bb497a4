"""Stop requests from the scheduler: SIGTERM and SIGUSR1 mean "checkpoint, then exit 0".

Slurm sends SIGUSR1 before the time limit (``#SBATCH --signal=B:USR1@120``, forwarded to
every rank by srun) and SIGTERM on ``scancel``, preemption or at the limit, followed by
SIGKILL after ``KillWait`` (30 s by default). The handler only records the signal, so it is
idempotent: a second SIGTERM, or SIGUSR1 then SIGTERM, changes nothing.

Signals reach ranks at different times, or only some ranks. Every rank calls
:meth:`StopSignals.agreed` after every step: one MAX allreduce of one integer on a
communicator of its own (so it never interleaves with gradient collectives). Every rank gets
the same answer at the same step, so all of them stop, and checkpoint, at that step.

    stop = StopSignals(comm)
    for step in ...:
        train_step()
        if stop.agreed():
            save_checkpoint(); break
    stop.close()

DataLoader worker processes ignore both signals (``gossipgrad.data.images``).
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


AGREEMENT_GRACE_S = 3.0
"""Seconds the per-step stop agreement waits beyond the communication deadline."""


class StopSignals:
    """Installs flag-setting handlers for ``signals`` (main thread only); ``close`` restores
    the previous ones. ``received`` is this rank's first signal number, or 0."""

    def __init__(self, comm: Communicator, signals: tuple[int, ...] = STOP_SIGNALS) -> None:
        self.comm = comm.dup() if comm.size > 1 else comm
        self.received = 0
        self.stopped = 0
        self._previous: dict[int, object] = {}
        if threading.current_thread() is threading.main_thread():
            for s in signals:
                self._previous[s] = signal.signal(s, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if not self.received:
            self.received = signum

    def agreed(self) -> int:
        """Collective: the largest signal number any rank has received (0: carry on).

        Once non-zero it stays non-zero (``stopped``), also if called again.
        """
        if not self.stopped:
            flag = np.array([self.received], dtype=np.int64)
            # A collective cannot tell who is missing; the point-to-point wait of a hung
            # rank's partner can. Waiting a little longer here lets that one fire first
            # and end the job with a message naming the rank.
            self.comm.iallreduce_(flag, ReduceOp.MAX).wait(self.comm.timeout + AGREEMENT_GRACE_S)
            self.stopped = int(flag[0])
        return self.stopped

    def rejoin(self, comm: Communicator) -> None:
        """Agree on ``comm`` from now on (the survivors, after a rank died); a signal
        already received is kept. Collective over ``comm`` (it is duplicated)."""
        self.comm = comm.dup() if comm.size > 1 else comm

    def close(self) -> None:
        for s, previous in self._previous.items():
            signal.signal(s, previous)
        self._previous = {}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
