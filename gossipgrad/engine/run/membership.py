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

With ``--on-failure respawn``, step 5 grows the survivors back to the launch size instead
(:mod:`gossipgrad.engine.run.respawn`): replacements take the dead ranks' places, state and
samples. When none can start (a full allocation), or a respawn stuck inside MPI, the
survivors go on as ``continue`` does from then on, and say so in one line.
"""

# Over 300 lines on purpose: the survivors' recovery both ways (shrink, grow back) and the
# start-up check of --on-failure are one protocol, read in one place.

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from gossipgrad.comm.base import Communicator, PeerFailed, ReduceOp, SpawnRefused, failure_of
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.engine.run import respawn
from gossipgrad.engine.run.signals import StopSignals
from gossipgrad.options import OnFailure
from gossipgrad.shuffle import ShuffleWorker


class Member(Protocol):
    """What membership asks of a run (:class:`gossipgrad.engine.run.loop.Run` is one)."""

    comm: Communicator
    source: Any
    faults: Any

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
        self,
        comm: Communicator,
        make_shuffle: Callable[[Communicator], ShuffleWorker | None],
        respawn: bool = False,
    ) -> None:
        self.launch: tuple[int, ...] = tuple(range(comm.size))  # rank -> launch rank
        self.size, self.me = comm.size, comm.rank  # at launch: this process's launch rank
        self.started = comm.size  # processes the job started (a dead one's slot stays taken)
        self.make_shuffle = make_shuffle
        self.respawn = respawn  # grow back (off for good once a respawn could not start)
        self.generation = 0  # respawns so far
        self.failures: list[dict[str, Any]] = []
        self.samples_lost = 0
        self.samples_twice = 0
        self._samples: int | None = None  # in-memory samples at launch, over all ranks
        # While a respawn is under way: the survivors' communicator and their launch ranks
        # (a failure before its commit starts the recovery again from there), and the
        # communicator with the replacements (revoked then).
        self._base: tuple[Communicator, tuple[int, ...]] | None = None
        self._grown: Communicator | None = None

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
                    self.me,
                    again,
                )
        raise PeerFailed(f"rank {run.comm.rank}: {MAX_RECOVERIES} recoveries in a row failed")

    def _recover(self, run: Member, stop: StopSignals, detected: float) -> int:
        old, launch = self._base if self._base is not None else (run.comm, self.launch)
        for comm in (old, self._grown):
            if comm is not None:
                comm.revoke()  # type: ignore[attr-defined]
        self._base = self._grown = None
        run.quiesce()
        new: Communicator = old.shrink()  # type: ignore[attr-defined]
        parents = new.parent_ranks  # type: ignore[attr-defined]
        dead = [launch[r] for r in range(old.size) if r not in parents]
        renumbered = {launch[p]: r for r, p in enumerate(parents)}
        self.launch = tuple(launch[p] for p in parents)
        step, closed, saved, reached = self._agree(new, run)
        if self.respawn:
            try:
                return self._grow(run, stop, new, (step, closed, saved, reached), detected)
            except SpawnRefused as exc:
                self.respawn = False
                if new.rank == 0:
                    log.warning(
                        "--on-failure respawn: no replacement could start (%s); going on "
                        "at size %d as --on-failure continue from now on",
                        exc,
                        new.size,
                    )
        stop.rejoin(new)
        run.rejoin(new, step, closed, saved)
        lost, twice = self._count_samples(run, new)
        run.consensus_()  # one model: the survivors' average
        seconds, resumed_at = allreduce_(
            new, np.array([time.perf_counter() - detected, time.time()]), ReduceOp.MAX
        )
        record = {
            "replaced": False,
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

    def _grow(
        self,
        run: Member,
        stop: StopSignals,
        new: Communicator,
        marks: tuple[int, int, int, int],
        detected: float,
    ) -> int:
        """Survivors: start a replacement for every launch rank not alive, settle with them
        (:func:`respawn.settle`) and return the step everyone resumes from."""
        replaced = tuple(r for r in range(self.size) if r not in self.launch)
        header = respawn.Header(
            *marks, generation=self.generation + 1, started=self.started, replaced=replaced
        )
        self._base = (new, self.launch)
        t0 = time.perf_counter()
        grown: Communicator = new.grow(  # type: ignore[attr-defined]
            replaced, self.me, header.words(), started=self.started
        )
        self.started += len(replaced)
        self._grown = grown
        spawned = time.perf_counter() - t0
        run.faults.at("respawn", header.step, grown)  # failure tests: a death in a respawn
        done = respawn.settle(run, self, stop, grown, header, run.marks()[0])
        return self._grown_back(run, grown, header, done, detected, spawned)

    def join(self, run: Member, stop: StopSignals, comm: Communicator) -> int:
        """A replacement (built on a mirror of ``comm``): settle with the survivors and
        return the step to go on from. Collective with their :meth:`_grow`."""
        header = respawn.Header.of(comm.welcome)  # type: ignore[attr-defined]
        self.started = header.started + len(header.replaced)
        self.launch = tuple(range(comm.size))
        self._grown = comm
        run.quiesce()  # what the mirror's build started (threads) stops here
        built = time.time() - getattr(comm, "joined_at", time.time())
        done = respawn.settle(run, self, stop, comm, header, header.step)
        return self._grown_back(run, comm, header, {**done, "build_seconds": built}, None, 0.0)

    def _grown_back(
        self,
        run: Member,
        comm: Communicator,
        header: respawn.Header,
        done: dict[str, Any],
        detected: float | None,
        spawned: float,
    ) -> int:
        """After the commit: the launch numbering again, and the record of this respawn."""
        self._base = self._grown = None
        self.launch = tuple(range(comm.size))
        self.generation = header.generation
        lost, _ = self._count_samples(run, comm)
        since = time.perf_counter() - detected if detected is not None else 0.0
        self.failures += respawn.records(comm, header, done, lost, since, spawned)
        return header.step

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
    """ValueError at start-up when ``--on-failure continue`` or ``respawn`` cannot work on
    ``comm``."""
    if on_failure is OnFailure.ABORT or comm.size == 1:
        return
    support = getattr(comm, "failure_support", None)
    why = support() if support is not None else f"{type(comm).__name__} cannot shrink"
    if why is None and on_failure is OnFailure.RESPAWN and not hasattr(comm, "grow"):
        why = f"{type(comm).__name__} cannot start replacements"
    if why is not None:
        raise ValueError(
            f"--on-failure {on_failure.value} needs an MPI with ULFM: {why}; or use "
            "--on-failure abort (the default)"
        )


def leads(launch_rank: int, summary: dict[str, Any]) -> bool:
    """Whether launch rank ``launch_rank`` is rank 0 of the final membership (the lowest
    launch rank alive: a replaced rank is alive again): the one that prints the summary."""
    dead: set[int] = set()
    for f in summary.get("failures") or []:
        (dead.discard if f.get("replaced") else dead.add)(f["rank"])
    alive = [r for r in range(summary.get("size_launch", 1)) if r not in dead]
    return bool(alive) and launch_rank == alive[0]
