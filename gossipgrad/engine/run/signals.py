"""Stop requests from the scheduler: SIGTERM and SIGUSR1 mean "checkpoint, then exit 0".

Slurm sends SIGUSR1 before the time limit (``#SBATCH --signal=B:USR1@120``, forwarded to
every rank by srun) and SIGTERM on ``scancel``, preemption or at the limit, followed by
SIGKILL after ``KillWait`` (30 s by default). The handler only records the signal, so it is
idempotent: a second SIGTERM, or SIGUSR1 then SIGTERM, changes nothing.

Signals reach ranks at different times, or only some ranks. Every rank calls
:meth:`StopSignals.agreed` after every step: one MAX allreduce of one integer on a
communicator of its own (so it never interleaves with gradient collectives). Every rank gets
the same answer at the same step, so all of them stop, and checkpoint, at that step.

That allreduce is a barrier at every step. With ``--max-lag S`` ranks may be S steps apart,
so :class:`PeriodicAgreement` runs it every ``period`` steps instead (the timing's
:meth:`~gossipgrad.specs.TimingSpec.agreement_period`), posted
at step m K and completed at step (m + 1) K (no rank waits unless another is more than K
steps behind); every rank still learns the answer at the same step and stops there. A stop
then takes effect within 2 K steps.

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

from gossipgrad.comm.base import Communicator, ReduceOp, Request
from gossipgrad.comm.collectives import wait_collective

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

    def agreed(self, step: int | None = None) -> int:
        """Collective: the largest signal number any rank has received (0: carry on).

        Once non-zero it stays non-zero (``stopped``), also if called again. ``step`` only
        goes into a timeout's message.
        """
        if not self.stopped:
            flag = np.array([self.received], dtype=np.int64)
            # The point-to-point wait of a hung rank's partner names it with its tag; waiting
            # a little longer here lets that one fire first. This one's timeout names the
            # ranks that did not arrive (comm.collectives).
            wait_collective(
                self.comm,
                self.comm.iallreduce_(flag, ReduceOp.MAX),
                "stop agreement",
                step,
                self.comm.timeout + AGREEMENT_GRACE_S,
            )
            self.stopped = int(flag[0])
        return self.stopped

    def rejoin(self, comm: Communicator) -> None:
        """Agree on ``comm`` from now on (the survivors, after a rank died); a signal
        already received is kept. Collective over ``comm`` (it is duplicated)."""
        self.comm = comm.dup() if comm.size > 1 else comm

    def close(self) -> None:
        """Restore the previous handlers; once a stop signal was received, ignore these
        signals instead: the process is stopping, and a repeated SIGTERM (a launcher or a
        scheduler forwarding it again) must not kill it during tear-down (exit 15 where
        the stop promises 0)."""
        for s, previous in self._previous.items():
            signal.signal(s, signal.SIG_IGN if self.received or self.stopped else previous)
        self._previous = {}


class PeriodicAgreement:
    """The stop agreement of ``signals`` every ``period`` steps, pipelined (``period`` 1:
    every step, blocking, as :meth:`StopSignals.agreed`).

    Call :meth:`agreed` after every step with the number of steps done, on every rank; at
    a multiple of ``period`` it completes the agreement posted one period earlier (every
    rank gets its answer at the same step) and posts the next. :meth:`close` completes the
    one still in flight at the end of a run.
    """

    def __init__(self, signals: StopSignals, period: int) -> None:
        if period < 1:
            raise ValueError(f"period must be >= 1, got {period}")
        self.signals, self.period = signals, period
        self._pending: tuple[np.ndarray, Request, int] | None = None

    def agreed(self, step: int) -> int:
        """The agreed signal number (0: carry on), identical on every rank at ``step``."""
        sig = self.signals
        if self.period == 1 or sig.comm.size == 1:
            return sig.agreed(step)
        if sig.stopped or step % self.period:
            return sig.stopped
        if self._complete():
            return sig.stopped
        flag = np.array([sig.received], dtype=np.int64)
        self._pending = (flag, sig.comm.iallreduce_(flag, ReduceOp.MAX), step)
        return 0

    def _complete(self) -> int:
        if self._pending is None:
            return 0
        flag, request, posted = self._pending
        self._pending = None
        wait_collective(
            self.signals.comm,
            request,
            "stop agreement",
            posted,
            self.signals.comm.timeout + AGREEMENT_GRACE_S,
        )
        self.signals.stopped = int(flag[0])
        return self.signals.stopped

    def close(self) -> None:
        """Complete the agreement in flight (every rank posted it); its answer comes too
        late to matter."""
        self._complete()


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
