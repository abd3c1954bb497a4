"""The background sample shuffle: every ``every`` steps, swap ``samples`` slots with a partner.

Run with the trainer (every rank constructs its worker at the same point, since it
duplicates the communicator, a collective)::

    store = ShardStore.of_tensors(ids, labels, data)
    loader = DataLoader(ShardDataset(store), batch_size=64, shuffle=True)
    with ShuffleWorker(store, comm, samples=16, every=1, seed=seed) as shuffle:
        for step, (x, y) in zip(range(steps), loader):
            ...                      # forward, backward, exchange, optimizer
            shuffle.on_step(step)    # raises here if the shuffle failed

Rounds are pinned to training steps: ``on_step(step)`` with ``step % every == 0`` (1) waits
for the round started at the previous boundary and applies it to the store, then (2) starts
round ``step // every``, whose messages travel on the worker's thread while the next
``every`` steps compute (the worker draws the round's plan and reads the outgoing samples
too, off the training thread). So the store changes only inside ``on_step``, at steps that every
rank agrees on: same seed and size give the same shard contents at every step, and at every
boundary the multiset of samples over all ranks is the one we started with.

Stop protocol: every round is started by every rank at the same step, so ``stop()`` only has
to finish the round in flight (which all ranks started) and apply it; no extra agreement is
needed and nothing can wait forever, because every wait has the communicator's deadline. A
rank that stops early (or dies) makes its partners raise CommTimeout naming it. On an
exception, ``stop(cancel=True)`` (what ``__exit__`` does) abandons the round within ~50 ms.

Thread level: the worker needs MPI_THREAD_MULTIPLE to talk on a second thread. When the
communicator serialises MPI calls behind a lock (``MpiCommunicator.lock`` is a real lock
below THREAD_MULTIPLE), mode ``auto`` runs each round synchronously inside ``on_step``
instead (``inline``): same rounds, same results, no overlap. The mode is logged at start-up.
"""

# Over 300 lines on purpose: one state machine (the shuffle round) with its thread and its
# checkpointed state.

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import numpy as np
import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.options import ShuffleMode, Topology, choice
from gossipgrad.shuffle.exchange import exchange_round
from gossipgrad.shuffle.plan import RoundPlan, ShufflePlan
from gossipgrad.shuffle.store import Samples, ShardStore, pack_samples, unpack_samples

__all__ = ["ShuffleError", "ShuffleMode", "ShuffleWorker"]

log = logging.getLogger(__name__)

_STATE_VERSION = 1


class ShuffleError(RuntimeError):
    """A shuffle round failed on this rank; the message names the rank and round."""


@dataclass
class _Round:
    index: int
    step: int
    plan: RoundPlan | None = None  # drawn, with the outgoing samples, by whoever runs it
    outgoing: Samples | None = None
    result: Samples | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _serialises_calls(comm: Communicator) -> bool:
    """True when the transport puts every call behind one lock (MPI below THREAD_MULTIPLE)."""
    lock = getattr(comm, "lock", None)
    return lock is not None and not isinstance(lock, contextlib.nullcontext)


class ShuffleWorker:
    """Swaps samples of ``store`` with a rotating partner on a duplicated communicator.

    Args:
        store: this rank's shard (modified in place, only inside ``on_step``/``stop``).
        comm: the training communicator; the worker uses ``comm.dup()`` (collective).
        samples: samples swapped per round (``--shuffle-samples``), ``<= len(store)``.
        every: start a round every ``every`` training steps (``--shuffle-every``).
        seed: shared seed of the plan (partners and slots).
        topology: partner schedule (``auto``, ``hypercube``, ``dissemination``).
        mode: ``auto`` (thread when the transport allows it), ``thread`` or ``inline``.
        timeout: deadline of one round in seconds (default: ``comm.timeout``).
    """

    def __init__(
        self,
        store: ShardStore,
        comm: Communicator,
        *,
        samples: int,
        every: int = 1,
        seed: int = 0,
        topology: str | Topology = Topology.AUTO,
        mode: str | ShuffleMode = ShuffleMode.AUTO,
        timeout: float | None = None,
    ):
        if every < 1:
            raise ValueError(f"--shuffle-every must be >= 1, got {every}")
        self.store, self.every = store, every
        self.plan = ShufflePlan(comm.size, len(store), samples, seed, topology)
        self.rank, self.size = comm.rank, comm.size
        self.timeout = float(timeout if timeout is not None else comm.timeout)
        self.mode = self._resolve_mode(mode, comm)
        self.comm = comm.dup()
        self.rounds_done = 0  # rounds applied to the store (no-op rounds included)
        self._last_step = -1
        self._inflight: _Round | None = None
        self._failed: ShuffleError | None = None
        self._stopped = False
        self._cond = threading.Condition()
        self._job: _Round | None = None
        self._exit = False
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        if self.mode is ShuffleMode.THREAD and self.plan.active:
            self._thread = threading.Thread(
                target=self._loop, daemon=False, name=f"gossipgrad-shuffle-r{self.rank}"
            )
            self._thread.start()

    def _resolve_mode(self, mode: str | ShuffleMode, comm: Communicator) -> ShuffleMode:
        wanted = choice(ShuffleMode, mode, "shuffle mode")
        serialised = _serialises_calls(comm)
        if wanted is ShuffleMode.THREAD and serialised:
            raise ValueError(
                "shuffle mode 'thread' needs MPI_THREAD_MULTIPLE, which MPI did not "
                "grant; use mode 'auto' or 'inline'"
            )
        chosen = (
            wanted
            if wanted is not ShuffleMode.AUTO
            else (ShuffleMode.INLINE if serialised else ShuffleMode.THREAD)
        )
        why = (
            (
                "the communicator serialises calls (below MPI_THREAD_MULTIPLE): rounds run "
                "synchronously in on_step, without overlap"
            )
            if chosen is ShuffleMode.INLINE and serialised
            else "rounds overlap compute on a background thread"
            if chosen is ShuffleMode.THREAD
            else "asked for"
        )
        log.log(
            logging.INFO if self.rank == 0 else logging.DEBUG,
            "shuffle: %s mode (%s); %s, every %d steps",
            chosen.value,
            why,
            self.plan,
            self.every,
        )
        return chosen

    def __repr__(self) -> str:
        return (
            f"ShuffleWorker(rank={self.rank}, mode={self.mode.value!r}, every={self.every}, "
            f"{self.plan}, rounds_done={self.rounds_done})"
        )

    # -- the training thread's calls ------------------------------------------------------

    def on_step(self, step: int) -> None:
        """Call once per training step, after the optimizer, with the global step (0, 1, ...).

        At ``step % every == 0`` applies the previous round and starts round
        ``step // every``. Raises ShuffleError if a round failed.
        """
        self.check()
        if self._stopped:
            raise RuntimeError(f"rank {self.rank}: on_step({step}) after stop()")
        if step <= self._last_step:
            raise ValueError(
                f"rank {self.rank}: on_step steps must increase; got {step} after {self._last_step}"
            )
        self._last_step = step
        if step % self.every == 0:
            self._apply_inflight()
            self._start(step // self.every, step)

    def check(self) -> None:
        """Re-raise, in the calling thread, a failure of the round in flight (cheap; no wait)."""
        if self._failed is not None:
            raise self._failed
        rnd = self._inflight
        if rnd is not None and rnd.done.is_set() and rnd.error is not None:
            self._raise(rnd)
        if self._thread is not None and not self._thread.is_alive() and not self._stopped:
            self._failed = ShuffleError(f"rank {self.rank}: the shuffle thread exited unexpectedly")
            raise self._failed

    def stop(self, cancel: bool = False) -> None:
        """Finish and apply the round in flight (every rank started it), then join the thread.

        With ``cancel=True`` (a failing run) the round is abandoned instead. Idempotent.
        """
        if self._stopped:
            return
        self._stopped = True
        try:
            if cancel:
                self._cancel.set()
            elif self._failed is None:
                self._apply_inflight()
        finally:
            with self._cond:
                self._exit = True
                self._cond.notify_all()
            if self._thread is not None:
                self._thread.join(self.timeout + 10.0)
                if self._thread.is_alive():
                    raise ShuffleError(f"rank {self.rank}: shuffle thread did not stop")

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(cancel=exc_type is not None)

    # -- rounds -----------------------------------------------------------------------------

    def _start(self, index: int, step: int) -> None:
        if not self.plan.active:
            self.rounds_done += 1
            return
        rnd = _Round(index, step)  # the worker draws the plan and reads the samples
        self._inflight = rnd
        if self._thread is None:
            self._run(rnd)
            return
        with self._cond:
            self._job = rnd
            self._cond.notify_all()

    def _await(self, rnd: _Round) -> Samples:
        if not rnd.done.wait(self.timeout + 10.0):
            self._failed = ShuffleError(
                f"rank {self.rank}, shuffle round {rnd.index}: the "
                "shuffle thread did not finish the round"
            )
            raise self._failed
        if rnd.error is not None:
            self._raise(rnd)
        assert rnd.result is not None
        return rnd.result

    def _apply_inflight(self) -> None:
        rnd = self._inflight
        if rnd is None:
            return
        result = self._await(rnd)
        self.store.write_(rnd.plan.slots, result)
        self._inflight = None
        self.rounds_done += 1

    def _raise(self, rnd: _Round) -> None:
        exc = rnd.error
        partners = f", partners dst {rnd.plan.dst} / src {rnd.plan.src}" if rnd.plan else ""
        self._failed = ShuffleError(
            f"rank {self.rank}, shuffle round {rnd.index} (step {rnd.step}{partners}): "
            f"{type(exc).__name__}: {exc}"
        )
        self._inflight = None
        raise self._failed from exc

    def _run(self, rnd: _Round) -> None:
        try:
            # Off the training thread (a thread round): the store changes only at a
            # boundary, after this round has been awaited, so this read sees the contents
            # of the boundary that started the round, as an inline round does.
            rnd.plan = self.plan.round(self.rank, rnd.index)
            rnd.outgoing = self.store.read(rnd.plan.slots)
            rnd.result = exchange_round(
                self.comm,
                self.store.kind,
                self.store.sample_shape,
                self.store.dtype,
                rnd.plan,
                rnd.outgoing,
                self.timeout,
                self._cancel.is_set,
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread
            rnd.error = exc
        finally:
            rnd.outgoing = None
            rnd.done.set()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._exit:
                    self._cond.wait(0.2)
                    if not threading.main_thread().is_alive():
                        log.warning(
                            "shuffle worker was never stopped; call stop() or use "
                            "it as a context manager"
                        )
                        return
                if self._job is None:
                    return
                rnd, self._job = self._job, None
            self._run(rnd)

    # -- checkpoints ------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Rounds done, last step, slot contents and the finished-but-unapplied round.

        Plain tensors, ints and strings (``torch.load(weights_only=True)`` reads it). Waits
        for the round in flight to arrive (every rank checkpoints at the same step) but does
        not apply it, so checkpointing never changes what training sees.
        """
        self.check()
        pending: dict[str, Any] = {}
        if self._inflight is not None:
            rnd = self._inflight
            samples = self._await(rnd)  # the plan is drawn by then
            pending = {
                "index": rnd.index,
                "step": rnd.step,
                "slots": torch.from_numpy(rnd.plan.slots.copy()),
                "samples": pack_samples(self.store.kind, samples),
            }
        p = self.plan
        return {
            "version": _STATE_VERSION,
            "rounds_done": self.rounds_done,
            "last_step": self._last_step,
            "store": self.store.state_dict(),
            "pending": pending,
            "plan": {
                "size": p.size,
                "shard_len": p.shard_len,
                "samples": p.samples,
                "seed": p.seed,
                "every": self.every,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`; call before the first ``on_step``."""
        if self._last_step >= 0 or self._inflight is not None:
            raise RuntimeError(f"rank {self.rank}: load_state_dict after on_step")
        p = self.plan
        mine = {
            "size": p.size,
            "shard_len": p.shard_len,
            "samples": p.samples,
            "seed": p.seed,
            "every": self.every,
        }
        if state.get("version") != _STATE_VERSION or state.get("plan") != mine:
            raise ValueError(
                f"shuffle checkpoint was written with {state.get('plan')}, this run "
                f"has {mine}; resume with the same number of ranks, --seed, "
                "--shuffle-samples and --shuffle-every"
            )
        self.store.load_state_dict(state["store"])
        self.rounds_done, self._last_step = int(state["rounds_done"]), int(state["last_step"])
        pending = state["pending"]
        if pending:
            plan = self.plan.round(self.rank, int(pending["index"]))
            if not np.array_equal(plan.slots, pending["slots"].numpy()):
                raise ValueError("shuffle checkpoint's pending round does not match the plan")
            samples = unpack_samples(pending["samples"], self.store.sample_shape, self.store.dtype)
            rnd = _Round(int(pending["index"]), int(pending["step"]), plan, result=samples)
            rnd.done.set()
            self._inflight = rnd
