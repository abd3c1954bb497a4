"""Growing back after a failure (``--on-failure respawn``): a replacement takes each dead
rank's place, state and data, and the job trains on at its launch size.

After the survivors have revoked, shrunk and agreed on the step (``membership.py``):

1. Spawn: ``comm.grow`` starts one replacement per dead launch rank (``MPI_Comm_spawn`` of
   the same command line; on the thread world, a thread running the same body), merges
   them in and restores the launch numbering. Each replacement gets :class:`Header`.
2. The replacement builds its model, optimizer, data and shuffle on a
   :class:`~gossipgrad.comm.mirror.MirrorCommunicator` (the same code as at launch, with no
   one to talk to), then every rank rebuilds what depends on the ranks, as after a shrink
   (:func:`settle`: stop agreement, exchange, shuffle worker, metrics).
3. State: each replacement receives, from one live rank (:func:`donor_of`: the dead rank's
   partner at its last step where gossip had one, else the next live rank), the model, the
   optimizer's state (momentum, the codec's residuals, the step count), the run's position
   (start, last evaluation, epochs closed) and what failures cost so far, as raw bytes
   (:mod:`gossipgrad.comm.statewire`). Per-step randomness needs nothing: dropout is seeded
   from (seed, rank, step), the batch order from (seed, rank, epoch).
4. Data (:func:`rebalance_`): the samples no survivor holds (the dead ranks' shards, and
   those a half-done shuffle round left nowhere) are read again from the in-memory dataset:
   first into the survivors' slots that hold a sample another rank also holds, the rest into
   the replacements' shards. Nothing is lost, nothing is held twice.
5. Commit: one agreement over everyone; a failure before it starts the recovery again from
   the survivors (the replacements end); after it, the replacements are ranks like any other.

A survivor that had completed one more step than the agreed one redoes it (its batch is seen
twice, counted per failure); their models then differ by that step, so everyone takes the
global average, as ``continue`` always does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.statewire import recv_state, send_state

log = logging.getLogger(__name__)

#: The fields of the survivors' header, in order (int64 each), then the replaced ranks.
FIELDS = ("step", "closed", "saved", "reached", "generation", "started")


@dataclass(frozen=True)
class Header:
    """What the survivors tell their replacements when they merge: the agreed step to resume
    from, the last epoch closed, the last checkpoint's step, the furthest step any survivor
    reached, which respawn this is, how many processes the job had started before it, and
    the launch ranks being replaced."""

    step: int
    closed: int
    saved: int
    reached: int
    generation: int
    started: int
    replaced: tuple[int, ...]

    def words(self) -> np.ndarray:
        values = [getattr(self, f) for f in FIELDS]
        return np.array([*values, *self.replaced], dtype=np.int64)

    @classmethod
    def of(cls, words: Any) -> Header:
        w = [int(x) for x in np.asarray(words).reshape(-1)]
        if len(w) <= len(FIELDS):
            raise ValueError(f"a respawn header has {len(FIELDS)} fields and ranks, got {w}")
        return cls(*w[: len(FIELDS)], replaced=tuple(w[len(FIELDS) :]))


def donor_of(rank: int, alive: list[int], step: int, schedule: Schedule | None) -> int:
    """The live rank that sends launch rank ``rank``'s replacement its state: its partner
    at the last step it completed (``step - 1``) when ``schedule`` (gossip's) gives it one
    that is alive, holding a near-copy of its model; else the next live rank after it.

        >>> donor_of(2, [0, 1, 3], 0, None), donor_of(3, [0, 1, 2], 5, None)
        (3, 0)
    """
    if not alive:
        raise ValueError(f"no live rank can send rank {rank}'s state")
    if schedule is not None and step > 0 and schedule.size > 1:
        peers = schedule.peers(rank, step - 1)
        if peers is not None and not peers.idle and peers.src in alive:
            return peers.src
    later = [r for r in alive if r > rank]
    return later[0] if later else alive[0]


def transfer_state(run: Any, membership: Any) -> dict[str, Any]:
    """What a donor sends a replacement (see the module docstring, point 3)."""
    opt = run.opt
    monitor = opt.monitor
    start = getattr(opt, "_start", None)
    return {
        "model": run.model.state_dict(),
        "optimizer": opt.state_dict(),
        "start_check": bool(start.pending) if start is not None else False,
        "run": {
            "start": run.start,
            "last": dict(run.last),
            "merges": [run.merges.count, run.merges.bytes],
        },
        "membership": {
            "failures": membership.failures,
            "samples_lost": membership.samples_lost,
            "generation": membership.generation,
        },
        "monitor": (
            {"calls": monitor.calls, "syncs": monitor.syncs, "max": monitor.max_distance}
            if monitor is not None
            else {}
        ),
    }


def apply_state_(run: Any, membership: Any, state: dict[str, Any]) -> None:
    """Load a donor's :func:`transfer_state` on the replacement."""
    run.model.load_state_dict(state["model"])
    opt = run.opt
    opt.load_state_dict(state["optimizer"])
    start = getattr(opt, "_start", None)
    if start is not None:  # the survivors run the first step's check only if still pending
        start.pending = state["start_check"]
    run.start, run.last = int(state["run"]["start"]), dict(state["run"]["last"])
    count, merged = state["run"]["merges"]  # the run's merges so far, counted as the donor's
    run.merges.count, run.merges.bytes = int(count), float(merged)
    m = state["membership"]
    membership.failures = list(m["failures"])
    membership.samples_lost = int(m["samples_lost"])
    membership.generation = int(m["generation"])
    mon = state["monitor"]
    if opt.monitor is not None and mon:
        opt.monitor.calls, opt.monitor.syncs = int(mon["calls"]), int(mon["syncs"])
        opt.monitor.max_distance = float(mon["max"])


def rebalance_(run: Any, comm: Communicator, replaced: tuple[int, ...]) -> int:
    """Collective: give every launch sample to exactly one rank again (point 4); returns
    the samples read again from the dataset on this rank. A source without a store
    (ImageFolder, synthetic) keeps its data: a replacement reads its launch rank's files."""
    source = run.source
    store = getattr(source, "store", None)
    if store is None or not hasattr(source, "refill_"):
        return 0
    expected = source.launch_ids
    top = int(expected.max(initial=-1)) + 1
    held = store.sample_ids() if comm.rank not in replaced else np.zeros(0, np.int64)
    counts = np.zeros(top, dtype=np.int64)
    np.add.at(counts, held, 1)
    first = np.full(top, comm.size, dtype=np.int64)
    first[held] = comm.rank
    allreduce_(comm, counts, ReduceOp.SUM, what="respawn: samples held")
    allreduce_(comm, first, ReduceOp.MIN, what="respawn: samples held")
    missing = expected[counts[expected] == 0]
    if comm.rank in replaced:
        slots = np.arange(len(store))
    else:  # a slot whose sample a lower rank also holds, or an earlier slot here
        _, firsts = np.unique(held, return_index=True)
        again = np.setdiff1d(np.arange(len(held)), firsts)
        slots = np.union1d(np.flatnonzero(first[held] < comm.rank), again)
    need = np.zeros(comm.size, dtype=np.int64)
    need[comm.rank] = len(slots)
    allreduce_(comm, need, ReduceOp.SUM, what="respawn: samples needed")
    if int(need.sum()) != len(missing):
        raise RuntimeError(
            f"rank {comm.rank}: {len(missing)} samples missing but {int(need.sum())} slots "
            "to fill: the shards were not the launch's"
        )
    begin = int(need[: comm.rank].sum())
    if len(slots):
        source.refill_(np.sort(slots), missing[begin : begin + len(slots)])
    return len(slots)


def move_state(run: Any, membership: Any, comm: Communicator, header: Header) -> list[dict]:
    """Collective: every replacement receives its donor's state; returns, per replaced
    rank, ``{"rank", "from", "bytes"}`` (the same on every rank)."""
    alive = [r for r in range(comm.size) if r not in header.replaced]
    shape = getattr(run.opt, "shape", None)  # one-peer shapes: the last partner's near-copy
    schedule = run.opt.schedule if shape is not None and shape.one_peer else None
    moved = np.zeros(len(header.replaced), dtype=np.int64)
    donors = [donor_of(r, alive, header.step, schedule) for r in header.replaced]
    for i, (rank, donor) in enumerate(zip(header.replaced, donors, strict=True)):
        if comm.rank == donor:
            moved[i] = send_state(comm, transfer_state(run, membership), rank, header.step)
        elif comm.rank == rank:
            state, _ = recv_state(comm, donor, header.step)
            apply_state_(run, membership, state)
    if len(moved):
        allreduce_(comm, moved, ReduceOp.MAX, what="respawn: state moved")
    return [
        {"rank": r, "from": d, "bytes": int(b)}
        for r, d, b in zip(header.replaced, donors, moved.tolist(), strict=True)
    ]


def settle(
    run: Any, membership: Any, stop: Any, comm: Communicator, header: Header, own_step: int
) -> dict[str, Any]:
    """Collective over everyone (survivors and replacements, on the communicator ``grow``
    gave): rebuild, move state and data, commit. Returns the figures of this respawn."""
    h = header
    t0 = time.perf_counter()
    stop.rejoin(comm)
    run.rejoin(comm, h.step, h.closed, h.saved)
    moved = move_state(run, membership, comm, h)
    refilled = rebalance_(run, comm, h.replaced)
    redone = np.array([max(0, own_step - h.step) * run.cfg.data.batch_size, refilled], np.int64)
    allreduce_(comm, redone, ReduceOp.SUM, what="respawn: samples")
    comm.agree(1)  # the commit: every live rank passes it, or every one raises PeerFailed
    if h.reached != h.step:  # a survivor's model holds one more step: one model again
        run.consensus_()
    return {
        "moved": moved,
        "samples_seen_twice": int(redone[0]),
        "samples_read_again": int(redone[1]),
        "settle_seconds": time.perf_counter() - t0,
    }


def records(
    comm: Communicator,
    header: Header,
    done: dict[str, Any],
    lost: int,
    since: float,
    spawned: float,
) -> list[dict[str, Any]]:
    """Collective: one failure record per replaced rank (identical on every rank), and the
    line rank 0 logs. ``since``: seconds since this rank detected the failure (0 on a
    replacement), ``spawned``: seconds its spawn took (0 on a replacement); ``done`` holds
    the replacement's ``build_seconds`` (from joining to settling; 0 elsewhere) and this
    rank's ``settle_seconds``."""
    mine = [since, spawned, done.get("build_seconds", 0.0), done["settle_seconds"], time.time()]
    seconds, spawn_s, build_s, settle_s, resumed_at = allreduce_(
        comm, np.array(mine), ReduceOp.MAX, what="respawn: record"
    )
    h = header
    out = [
        {
            "rank": moved["rank"],
            "step": h.step,
            "size": comm.size,
            "replaced": True,
            "generation": h.generation,
            "from": moved["from"],
            "bytes": moved["bytes"],
            "steps_redone": h.reached - h.step,
            "samples_lost": lost,
            "samples_seen_twice": done["samples_seen_twice"],
            "samples_read_again": done["samples_read_again"],
            "seconds": round(float(seconds), 3),
            "spawn_seconds": round(float(spawn_s), 3),
            "build_seconds": round(float(build_s), 3),
            "settle_seconds": round(float(settle_s), 3),
            "resumed_at": round(float(resumed_at), 3),
        }
        for moved in done["moved"]
    ]
    if comm.rank == 0:
        _say(h, done, lost, comm.size, (seconds, spawn_s, build_s, settle_s))
    return out


def _say(h: Header, done: dict[str, Any], lost: int, size: int, seconds: tuple[float, ...]) -> None:
    """Rank 0's line about one respawn; ``seconds``: detection to training, the spawn, the
    replacement's build, state and samples."""
    many = len(h.replaced) > 1
    log.warning(
        "launch rank%s %s died; replaced (respawn %d), state from rank%s %s (%.1f MB); "
        "back at size %d at step %d (%d redone, %d samples seen twice, %d read again, "
        "%d lost), training again %.2f s after the failure was detected (spawn %.2f s, "
        "the replacement's build %.2f s, state and samples %.2f s)",
        "s" if many else "",
        ", ".join(map(str, h.replaced)),
        h.generation,
        "s" if many else "",
        ", ".join(str(m["from"]) for m in done["moved"]),
        sum(m["bytes"] for m in done["moved"]) / 1e6,
        size,
        h.step,
        h.reached - h.step,
        done["samples_seen_twice"],
        done["samples_read_again"],
        lost,
        *seconds,
    )
