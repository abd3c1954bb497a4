"""The worker half of ``--strategy ps``: pushing gradients to their owners, pulling
parameters back, and bringing a bucket of the model up to a server clock.

Per bucket ``b`` owned by another rank (:class:`ShardWorker`):

- ``push(b, t)``: send step t's gradient to the owner (``Tag.PS_PUSH + b``), from the
  gradient bucket itself with ``max_lag`` 0 (it is not zeroed before the send completes), else
  from one of ``max_lag + 1`` copies (a rank running ahead keeps that many in flight);
- ``post_pull(b, v)``: post the receive of version v (``Tag.PS_PULL + b``), into the parameter
  bucket itself with ``max_lag`` 0 (the forward waits for it before reading), else into one of
  ``max_lag + 1`` buffers that ``refresh`` copies in (a rank computing on version v must not
  see v + 1 land in the middle of its step);
- ``refresh(b, need)``: copy the newest version that has arrived into the model, waiting
  while it is older than ``need``. A bucket this rank owns is refreshed from its master.
  With a lossy codec a pull is the change since the last version (the owner's
  :meth:`ShardServer.published`), so every version that has arrived is added, in order.

Every wait serves this rank's own shard (:meth:`ShardServer.service`), so ranks waiting for
each other's updates all make progress; each has the communicator's deadline and says what
it waited for. Only the training thread calls these methods.
"""

# Over 300 lines on purpose: the worker's half of one protocol (pushes, pulls, waits that
# say what they waited for) reads best in one place.

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

import torch

from gossipgrad.choices import timeout_hint
from gossipgrad.comm.base import Backoff, CommTimeout, Communicator, Tag, WaitContext
from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.buckets import BucketLayout
from gossipgrad.engine.commthread import CommThread
from gossipgrad.engine.ps.server import (
    PULL_RECV,
    PUSH_SEND,
    DensePush,
    ShardServer,
    request_key,
)

log = logging.getLogger(__name__)


class ShardWorker:
    """This rank's copy of every bucket: its clock, pushes and pulls in flight.

    Args:
        layout: the model's buckets (``grads`` and ``values`` bound).
        owners: the owner of each bucket.
        server: this rank's own shard (served in every wait, read for owned buckets).
        comm, thread, stager, max_lag, push: as for :class:`ShardServer`.
    """

    def __init__(
        self,
        layout: BucketLayout,
        owners: list[int],
        server: ShardServer,
        comm: Communicator,
        thread: CommThread | None,
        stager: Stager,
        max_lag: int,
        push: DensePush,
        push_codec: Codec | None = None,
        pull_codec: Codec | None = None,
    ) -> None:
        self.push_codec, self.pull_codec = push_codec or Codec(), pull_codec or Codec()
        self.layout, self.owners, self.server = layout, owners, server
        self.comm, self.thread, self.stager, self.max_lag, self.push = (
            comm,
            thread,
            stager,
            max_lag,
            push,
        )
        self.step = 0  # for messages: the step the caller is at
        self.broken = False  # a wait failed: nothing more to wait for at close
        self.reset(0)

    def reset(self, step: int) -> None:
        """Every bucket at clock ``step``, nothing in flight (start, resume)."""
        ring = self.max_lag + 1
        self.have = [step] * len(self.layout.buckets)
        self.pulls: list[deque[tuple[int, int]]] = [deque() for _ in self.layout.buckets]
        self.used: set[int] = set()  # keys of push sends ever posted
        self.pull_bufs: list[list[torch.Tensor]] = []
        self.push_bufs: list[list[torch.Tensor]] = []
        for b in self.layout.buckets:
            theirs = self.owners[b.index] != self.comm.rank
            identity = self.push_codec.in_place and self.pull_codec.in_place
            direct = self.max_lag == 0 and not self.stager.staging(b.values) and identity
            pulls = (
                [b.values]
                if direct
                else [self._buffer(self.pull_codec, b.values) for _ in range(ring)]
            )
            pushes = [] if direct else [self._buffer(self.push_codec, b.grads) for _ in range(ring)]
            self.pull_bufs.append(pulls if theirs else [])
            self.push_bufs.append(pushes if theirs else [])

    def _buffer(self, codec: Codec, like: torch.Tensor) -> torch.Tensor:
        """A wire buffer of ``codec`` for a bucket like ``like``, in host memory when
        device buffers are staged."""
        wire = codec.wire_like(like)
        return self.stager.empty_like(wire) if self.stager.staging(wire) else wire

    # -- push and pull ---------------------------------------------------------------------
    def push_(self, index: int, step: int) -> None:
        """Send bucket ``index``'s gradient of ``step`` to its owner (nothing if that is us)."""
        owner = self.owners[index]
        if owner == self.comm.rank:
            return
        bucket = self.layout.buckets[index]
        payload = self.push.payload(bucket, bucket.grads)
        ring = self.push_bufs[index]
        slot = step % len(ring) if ring else 0
        key = request_key(PUSH_SEND, index, slot)
        if ring:
            if key in self.used:
                self.wait(
                    lambda: self.thread.done(key),
                    lambda: (
                        f"the push of bucket {index} of step {step - len(ring)} "
                        f"to rank {owner} has not completed (tag PS_PUSH_{index}); "
                        f"is rank {owner} alive?"
                    ),
                )
            payload = self.push_codec.encode_(payload, ring[slot], index)
        self.stager.ready(payload)  # a device buffer goes to MPI after the kernels filling it
        self.used.add(key)
        tag = Tag.PS_PUSH + index
        ctx = WaitContext("received nothing", owner, tag, step)
        self.thread.submit(
            key,
            lambda: Pending(payload, [self.comm.isend(payload, owner, tag, ctx)]),
            eager=not payload.is_cuda,
        )

    def wait_direct_pushes(self) -> None:
        """Before the gradient buckets are zeroed: pushes sent from them have completed."""
        direct = {
            b.index: request_key(PUSH_SEND, b.index, 0)
            for b in self.layout.buckets
            if not self.push_bufs[b.index]
        }
        direct = {b: k for b, k in direct.items() if k in self.used}
        self.wait(
            lambda: all(self.thread.done(k) for k in direct.values()),
            lambda: (
                "the gradient pushes of step {} to rank(s) {} have not completed "
                "(tags {}); are they alive?".format(
                    self.step - 1,
                    sorted({self.owners[b] for b, k in direct.items() if not self.thread.done(k)}),
                    ", ".join(f"PS_PUSH_{b}" for b in direct),
                )
            ),
        )

    def post_pull(self, index: int, version: int) -> None:
        """Post the receive of bucket ``index``'s parameters of clock ``version`` (a bucket
        another rank owns). Precondition: its ring slot was consumed (``refresh`` to
        ``version - max_lag - 1``)."""
        bufs = self.pull_bufs[index]
        slot = version % len(bufs)
        buf, owner, tag = bufs[slot], self.owners[index], Tag.PS_PULL + index
        ctx = WaitContext("sent nothing", owner, tag, version - 1)
        self.thread.submit(
            request_key(PULL_RECV, index, slot),
            lambda: Pending(buf, [self.comm.irecv(buf, owner, tag, ctx)]),
            eager=not buf.is_cuda,
        )
        self.pulls[index].append((version, slot))

    # -- bringing a bucket up to date --------------------------------------------------------
    def take(self, index: int) -> None:
        """Copy the newest version that has arrived (or the own master) into the model."""
        if self.owners[index] == self.comm.rank:
            ob = self.server.owned[index]
            if ob.version > self.have[index]:
                with torch.no_grad():
                    self.layout.buckets[index].values.copy_(self.server.published(index))
                self.have[index] = ob.version
            return
        pulls, newest = self.pulls[index], None
        values = self.layout.buckets[index].values
        while pulls and self.thread.done(request_key(PULL_RECV, index, pulls[0][1])):
            newest = pulls.popleft()
            if not self.pull_codec.lossless:  # a delta: every version, in order
                wire = self.stager.incoming(self.pull_bufs[index][newest[1]], values)
                values.add_(self.pull_codec.decode(wire, values, index))
        if newest is None:
            return
        buf = self.pull_bufs[index][newest[1]]
        if buf is not values and self.pull_codec.lossless:
            wire = self.stager.incoming(buf, values)
            values.copy_(self.pull_codec.decode(wire, values, index))
        self.have[index] = newest[0]

    def refresh(self, index: int, need: int) -> None:
        """Bring bucket ``index`` in the model to server clock >= ``need``."""
        self.take(index)
        if self.have[index] < need:
            self.wait(
                lambda: self.take(index) or self.have[index] >= need,
                lambda: self._stuck(index, need),
            )

    def wait(self, ready: Callable[[], bool], what: Callable[[], str]) -> None:
        """Poll (and serve the owned shard) until ``ready()``; CommTimeout after the
        communicator's deadline: "rank R, step S: <what()> for T s; <hint> ..." where
        ``what()`` ends with its question after a semicolon."""
        if ready():
            return
        deadline = time.monotonic() + self.comm.timeout
        policy = self.comm.policy
        backoff = Backoff(policy.spin_for_this_thread(), policy.max_pause_s)
        try:
            while True:
                moved = self.thread.poll() if self.thread is not None else False
                moved = self.server.service() or moved
                if ready():
                    return
                if time.monotonic() > deadline:
                    said, _, hint = what().partition("; ")
                    raise CommTimeout(
                        f"rank {self.comm.rank}, step {self.step}: {said} for "
                        f"{self.comm.timeout:g} s; {hint} {timeout_hint()}"
                    )
                if not moved:
                    backoff.sleep()
        except BaseException:
            self.broken = True
            raise

    def quiet(self) -> bool:
        """No push or pull send of this rank is in flight."""
        return self.thread is None or (
            self.server.quiet() and all(self.thread.done(k) for k in self.used)
        )

    def outstanding(self) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
        """What this rank still waits for (never waits): per peer, the tags of the gradient
        pushes missing for the oldest pending update of each owned bucket (the update that
        holds everything up), and of the parameter pulls not yet arrived."""
        grads: dict[int, set[str]] = {}
        params: dict[int, set[str]] = {}
        if self.thread is None:
            return grads, params
        for index in self.server.owned:
            for src in self.server.missing_pushes(index):
                grads.setdefault(src, set()).add(f"PS_PUSH_{index}")
        for index, pulls in enumerate(self.pulls):
            if any(not self.thread.done(request_key(PULL_RECV, index, slot)) for _, slot in pulls):
                params.setdefault(self.owners[index], set()).add(f"PS_PULL_{index}")
        return grads, params

    def report_outstanding(self) -> None:
        """Log (an error) which peers this rank still waits for, and for what."""
        try:
            grads, params = self.outstanding()
        except Exception as exc:  # noqa: BLE001 - the thread's own error names its peer
            log.error(
                "rank %d, step %d: ps stopped with its communication thread failed: %s",
                self.comm.rank,
                self.step,
                exc,
            )
            return

        def listed(found: dict[int, set[str]]) -> str:
            tags = ", ".join(sorted({t for ts in found.values() for t in ts}))
            return f"rank(s) {sorted(found)} (tags {tags})"

        parts = ([f"gradients from {listed(grads)}"] if grads else []) + (
            [f"parameters from {listed(params)}"] if params else []
        )
        if parts:
            log.error(
                "rank %d, step %d: ps stopped waiting for %s; is every one of them alive?",
                self.comm.rank,
                self.step,
                " and ".join(parts),
            )

    def _stuck(self, index: int, need: int) -> str:
        owner = self.owners[index]
        if owner != self.comm.rank:
            return (
                f"bucket {index}'s parameters of clock {need} have not arrived from its "
                f"owner, rank {owner} (tag PS_PULL_{index}); is rank {owner} alive?"
            )
        ob = self.server.owned[index]
        missing = self.server.missing_pushes(index)
        return (
            f"the gradients of bucket {index} for step {ob.version} have not arrived from "
            f"rank(s) {missing} (tag PS_PUSH_{index}); are they alive?"
        )
