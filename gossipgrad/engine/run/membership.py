"""Membership changes: after a rank dies, the survivors agree on a new communicator and go on.

With ``--on-failure continue`` on an MPI with ULFM (Open MPI 5 under ``mpiexec --with-ft
ulfm``), or on the thread world of the tests, a dead rank costs the job its shard and a few
steps instead of the job:

1. Detect: an operation with the dead rank raises ``PeerFailed`` on some survivor, which
   revokes the communicator and its duplicates (``comm/mpi.py``), so every survivor's next
   operation raises it too, wherever it waits (step, shuffle round, evaluation, checkpoint).
2. Quiesce: the communication thread and the shuffle worker drop what is in flight.
3. Shrink: ``comm.shrink()``; ranks renumber in their old order (rank 0 logs the map).
4. Agree (MIN allreduces on the new communicator): the step to resume from (the last step
   every survivor completed), the last epoch every survivor closed (evaluated and
   checkpointed) and the last checkpoint every survivor finished.
5. Rebuild for the new size: schedule (dissemination when not a power of two, under
   ``--topology auto``), exchange and communication thread, stop agreement, shuffle worker
   (every store keeps its samples), evaluation split (and, for ImageFolder data, the train
   split from the next epoch), metrics, progress bar and INFO logging on the new rank 0.
6. Restore: a global average of the survivors' parameters, buffers and momentum, so they
   continue from one model.

Nothing is silently lost: each failure is logged on the new rank 0 and kept for the summary
(launch rank, step resumed from, steps redone, seconds from detection to training again and
the wall-clock time it did, ``resumed_at``), and
the summary counts the in-memory samples gone with dead ranks and those a half-finished
shuffle round left on two ranks. A failure during recovery starts it again on what is left.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from gossipgrad.comm.base import Communicator, PeerFailed, ReduceOp, failure_of
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.run.signals import StopSignals
from gossipgrad.options import OnFailure
from gossipgrad.shuffle import ShuffleWorker


class Member(Protocol):
    """What membership asks of a run (:class:`gossipgrad.engine.run.loop.Run` is one)."""

    comm: Communicator
    source: Any

    def marks(self) -> tuple[int, int, int]:
        """(steps completed, last epoch closed, last checkpoint's step or -1)."""
        ...

    def quiesce(self) -> None:
        """Drop every exchange and shuffle round in flight (the communicator is revoked)."""
        ...

    def rejoin(self, comm: Communicator, step: int, closed: int, saved: int) -> None:
        """Rebuild what depends on rank and size on the survivors' ``comm`` at ``step``."""
        ...

    def consensus_(self) -> None:
        """Collective: one model, the survivors' average of parameters, buffers, momentum."""
        ...


log = logging.getLogger(__name__)

MAX_RECOVERIES = 16
"""Recoveries one run attempts before giving up (each needs a rank to have died)."""


class Membership:
    """The ranks alive, by launch rank, and what their failures cost.

    Args:
        comm: the communicator at launch (``failure_support()`` must be None).
        make_shuffle: builds the shuffle worker on a communicator (None: no shuffle); a
            run asks :meth:`shuffle_for` after a shrink.
    """

    def __init__(
        self, comm: Communicator, make_shuffle: Callable[[Communicator], ShuffleWorker | None]
    ) -> None:
        self.launch: tuple[int, ...] = tuple(range(comm.size))  # rank -> launch rank
        self.make_shuffle = make_shuffle
        self.failures: list[dict[str, Any]] = []
        self.samples_lost = 0
        self.samples_twice = 0
        self._samples: int | None = None  # in-memory samples at launch, over all ranks

    def start(self, run: Member) -> None:
        """Count the in-memory samples at launch (equal shards: no communication)."""
        store = getattr(run.source, "store", None)
        if store is not None:
            self._samples = len(store) * run.comm.size

    def summary(self) -> dict[str, Any]:
        return {
            "failures": list(self.failures),
            "samples_lost": self.samples_lost,
            "samples_twice": self.samples_twice,
        }

    def recover(self, run: Member, stop: StopSignals, exc: BaseException) -> int:
        """Survive ``exc`` if a rank's death caused it (else re-raise it); return the step
        every survivor resumes from. Collective over the survivors."""
        if failure_of(exc) is None:
            raise exc
        detected = time.perf_counter()
        for _ in range(MAX_RECOVERIES):
            try:
                return self._recover(run, stop, detected)
            except Exception as again:  # noqa: BLE001 - only a death is survived
                if failure_of(again) is None:
                    raise
                log.warning(
                    "launch rank %d: another rank died during recovery: %s",
                    self.launch[run.comm.rank],
                    again,
                )
        raise PeerFailed(f"rank {run.comm.rank}: {MAX_RECOVERIES} recoveries in a row failed")

    def _recover(self, run: Member, stop: StopSignals, detected: float) -> int:
        old = run.comm
        old.revoke()  # type: ignore[attr-defined]
        run.quiesce()
        new: Communicator = old.shrink()  # type: ignore[attr-defined]
        parents = new.parent_ranks  # type: ignore[attr-defined]
        dead = [self.launch[r] for r in range(old.size) if r not in parents]
        renumbered = {self.launch[p]: r for r, p in enumerate(parents)}
        self.launch = tuple(self.launch[p] for p in parents)
        step, closed, saved, reached = self._agree(new, run)
        stop.rejoin(new)
        run.rejoin(new, step, closed, saved)
        lost, twice = self._count_samples(run, new)
        run.consensus_()  # one model: the survivors' average
        seconds, resumed_at = allreduce_(
            new, np.array([time.perf_counter() - detected, time.time()]), ReduceOp.MAX
        )
        record = {
            "ranks": dead,
            "step": step,
            "size": new.size,
            "steps_redone": reached - step,
            "samples_lost": lost,
            "seconds": round(float(seconds), 3),
            "resumed_at": round(float(resumed_at), 3),
        }
        self.failures += [{"rank": r, **record} for r in dead]
        if new.rank == 0:
            log.warning(
                "launch rank%s %s died; %d survivors renumbered (launch rank -> rank) "
                "%s; resuming at step %d (%d redone), %d in-memory samples lost%s, "
                "training again %.2f s after the failure was detected",
                "s" if len(dead) > 1 else "",
                ", ".join(map(str, dead)),
                new.size,
                renumbered,
                step,
                reached - step,
                lost,
                f", {twice} now on two ranks" if twice else "",
                seconds,
            )
        return step

    @staticmethod
    def _agree(comm: Communicator, run: Member) -> tuple[int, int, int, int]:
        """(step to resume from, last epoch closed, last checkpoint, furthest step reached)
        over the survivors."""
        step, closed, saved = run.marks()
        mins = np.array([step, closed, saved, -step], dtype=np.int64)
        allreduce_(comm, mins, ReduceOp.MIN)
        return int(mins[0]), int(mins[1]), int(mins[2]), int(-mins[3])

    def shuffle_for(self, comm: Communicator) -> ShuffleWorker | None:
        """A new shuffle worker on the survivors' communicator (every store keeps its
        samples), or None."""
        return self.make_shuffle(comm)

    def _count_samples(self, run: Member, comm: Communicator) -> tuple[int, int]:
        """In-memory samples lost by this failure, and held twice in all (collective)."""
        store = getattr(run.source, "store", None)
        if store is None or self._samples is None:
            return 0, 0
        ids = store.sample_ids()
        top = allreduce_(comm, np.array([ids.max(initial=-1) + 1], dtype=np.int64), ReduceOp.MAX)[0]
        counts = np.zeros(int(top), dtype=np.int64)
        np.add.at(counts, ids, 1)
        allreduce_(comm, counts, ReduceOp.SUM)
        lost_now = self._samples - int((counts > 0).sum()) - self.samples_lost
        self.samples_lost += lost_now
        self.samples_twice = int(np.maximum(counts - 1, 0).sum())
        return lost_now, self.samples_twice


def check_support(on_failure: OnFailure, comm: Communicator) -> None:
    """ValueError at start-up when ``--on-failure continue`` cannot work on ``comm``."""
    if on_failure is not OnFailure.CONTINUE or comm.size == 1:
        return
    support = getattr(comm, "failure_support", None)
    why = support() if support is not None else f"{type(comm).__name__} cannot shrink"
    if why is not None:
        raise ValueError(
            f"--on-failure continue needs an MPI with ULFM: {why}; or use "
            "--on-failure abort (the default)"
        )


def leads(launch_rank: int, summary: dict[str, Any]) -> bool:
    """Whether launch rank ``launch_rank`` is rank 0 of the final membership (the lowest
    launch rank alive): the one that prints the summary."""
    dead = {f["rank"] for f in summary.get("failures") or []}
    alive = [r for r in range(summary.get("size_launch", 1)) if r not in dead]
    return bool(alive) and launch_rank == alive[0]
