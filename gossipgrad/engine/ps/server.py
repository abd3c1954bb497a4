"""The server half of ``--strategy ps``: the buckets this rank owns, their master copies,
their optimizers, and the per-bucket push/pull protocol of an owner.

Per owned bucket ``b`` and step ``v`` (:class:`ShardServer`):

1. ``open(v)``: post the receives of step v's gradient pushes from the other ranks
   (``Tag.PS_PUSH + b``) for slot ``v mod (max_lag + 2)``: into a pool of receive buffers
   that holds them all, or for a bucket too large for that (:data:`PUSH_POOL_BYTES`) a few
   at a time, each batch summed into the slot's accumulator on the communication thread
   before the next is posted. An owner's receive memory then stays a few buckets per slot
   however many ranks push to it, where one buffer per rank would grow with the job (a
   411 MB layer at 64 ranks: 26 GB per slot).
2. ``contribute(v, ...)``: copy this rank's own gradient of step v into the slot, with the
   optimizer hyperparameters (learning rate ...) this rank's param groups held at step v.
3. ``service()``: when every push of step v has arrived (and the parameters of update v-1
   have reached every worker), sum the other ranks' gradients in rank order, add this
   rank's, divide by ``size``, step the bucket's optimizer on the master copy (clock v ->
   v+1) and send the master to every other rank (``Tag.PS_PULL + b``). Updates apply in
   step order.

The optimizer: one ``torch.optim`` optimizer per owned bucket, built as
``type(optimizer)(groups, **optimizer.defaults)`` over master tensors of the same shapes as
the model's parameters (``groups``: the user's param groups restricted to the bucket, with
their hyperparameters), so its state exists only at the owner, 1/size of the model's on
average. Master copies live on the model's device, or in (pinned) host memory with
``--offload optimizer``.

Only the training thread calls these methods; the communication thread polls requests and,
for a bucket received in batches, sums each batch and posts the next.
The sum's order is fixed (the others in rank order, then the owner's own, whatever the
pool's batches), so a run is reproducible; with ``max_lag`` 0 the update is the one
allreduce-SGD takes (the same mean gradient, up to the order of the float sum).

The push codec (:class:`DensePush`) is the per-bucket interface a different push (e.g.
sufficient factors) plugs into: what a worker sends for a bucket, the receive buffer the
owner posts for it, and how the owner turns what arrived into the bucket's mean gradient.
"""

# Over 300 lines on purpose: the owner's half of one protocol (slots, updates, pulls as
# deltas under a lossy codec) reads best in one place.

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Tag, WaitContext
from gossipgrad.comm.codecs import Codec
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.buckets import Bucket
from gossipgrad.engine.commthread import CommThread
from gossipgrad.engine.optim import rebuild
from gossipgrad.engine.ps.shards import PUSH_POOL_BYTES, push_pool
from gossipgrad.settings import settings

log = logging.getLogger(__name__)

PUSH_RECV, PULL_SEND, PUSH_SEND, PULL_RECV = 1, 2, 3, 4

# PUSH_POOL_BYTES: the most bytes of push receive buffers one owned bucket's slot holds; a
# bucket whose pushes need more is received in batches of ``push_pool`` ranks. Below it every
# push lands at once (nothing waits for a batch to be summed); above it the owner's link is
# what limits the receive anyway. The planner's memory estimate charges the same pools.


def request_key(kind: int, bucket: int, slot: int, peer: int = 0) -> int:
    """A communication-thread key for one request: kind, bucket, ring slot and peer."""
    return ((kind * 1_000_003 + bucket) * 1_009 + slot) * 1_000_003 + peer


class DensePush:
    """The dense push: a worker sends the bucket's gradient; the owner sums them.

    ``payload(bucket, grads)``: the tensor a worker sends (read until the send completes);
    ``receive_buffer(bucket, like)``: what the owner receives one push into;
    ``reduce_(out, parts)``: ``out`` <- the sum of ``out`` and ``parts`` (received pushes, in
    order), in place: the owner folds its pushes in this way, batch by batch.
    """

    def payload(self, bucket: Bucket, grads: torch.Tensor) -> torch.Tensor:
        return grads

    def receive_buffer(self, bucket: Bucket, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)

    def reduce_(self, out: torch.Tensor, parts: list[torch.Tensor]) -> None:
        for part in parts:
            out.add_(part.to(out.device))


@dataclass
class _Slot:
    """One step's pushes of one owned bucket."""

    step: int = -1
    acc: torch.Tensor | None = None  # the sum of the other ranks' pushes folded so far
    own: torch.Tensor | None = None  # this rank's own push
    pool: list[torch.Tensor] = field(default_factory=list)  # one batch's decoded pushes
    recv: list[torch.Tensor | None] = field(default_factory=list)  # staged receive buffers
    folded: int = 0  # how many of the other ranks' pushes are in ``acc``
    batch: list[tuple[int, Any]] = field(default_factory=list)  # (source, request) in flight
    contributed: bool = False
    hyper: list[dict[str, Any]] = field(default_factory=list)


class OwnedBucket:
    """One bucket this rank serves: master copy, mean gradient, optimizer, push slots."""

    def __init__(
        self,
        bucket: Bucket,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        pin: bool,
        slots: int,
    ) -> None:
        self.bucket = bucket
        self.index = bucket.index
        self.master = torch.empty(
            bucket.numel, dtype=bucket.params[0].dtype, device=device, pin_memory=pin
        )
        self.grad = torch.zeros_like(self.master)
        self.masters: list[torch.nn.Parameter] = []
        for p, off in zip(bucket.params, bucket.offsets, strict=True):
            if bucket.span is not None:  # a part of p: flat, as the elementwise update sees it
                m = torch.nn.Parameter(self.master)
                m.grad = self.grad
            else:
                m = torch.nn.Parameter(self.master[off : off + p.numel()].view_as(p))
                m.grad = self.grad[off : off + p.numel()].view_as(p)
            self.masters.append(m)
        self.load_from_model_()
        self.group_of: list[int] = []  # inner group -> user group index
        groups = []
        ids = {id(p): m for p, m in zip(bucket.params, self.masters, strict=True)}
        for j, g in enumerate(optimizer.param_groups):
            mine = [ids[id(p)] for p in g["params"] if id(p) in ids]
            if mine:
                groups.append({**hyperparameters(g), "params": mine})
                self.group_of.append(j)
        if sum(len(g["params"]) for g in groups) != len(self.masters):
            raise ValueError(
                f"bucket {bucket.index}: some of its parameters are in no param "
                "group of the optimizer; pass every trainable parameter to it"
            )
        try:
            self.optimizer = rebuild(optimizer, groups)
        except TypeError as exc:
            raise ValueError(
                f"--strategy ps builds one {type(optimizer).__name__} per owned "
                "bucket as type(optimizer)(param_groups, **optimizer.defaults), "
                f"which failed ({exc}); use a torch.optim optimizer"
            ) from exc
        self.slots = [_Slot() for _ in range(slots)]
        self.version = 0  # updates applied (the server clock)
        self.sending: list[int] = []  # keys of the pull sends of the current version

    def load_from_model_(self) -> None:
        """Master <- the model's current parameter values (start, resume)."""
        with torch.no_grad():
            for p, m in zip(self.bucket.params, self.masters, strict=True):
                span = self.bucket.span
                m.copy_(p.detach() if span is None else p.detach().reshape(-1)[span[0] : span[1]])


def hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    """A param group's settings without its parameters (what a step's update uses)."""
    return {k: v for k, v in group.items() if k != "params"}


class ShardServer:
    """The owned buckets of one rank and the owner's side of the protocol.

    Args:
        buckets: the owned buckets (their ``values``/``grads`` bound to the model).
        optimizer: the user's optimizer (its class, defaults and param groups are copied).
        comm, thread, stager: transport, the polling thread, device staging.
        max_lag: the slack; ``max_lag + 2`` push slots per owned bucket.
        device: where master copies and optimizer state live; ``pin`` pins them.
    """

    def __init__(
        self,
        buckets: list[Bucket],
        optimizer: torch.optim.Optimizer,
        comm: Communicator,
        thread: CommThread | None,
        stager: Stager,
        max_lag: int,
        device: torch.device,
        pin: bool = False,
        push: DensePush | None = None,
        codec: Codec | None = None,
        pull_codec: Codec | None = None,
    ) -> None:
        self.comm, self.thread, self.stager = comm, thread, stager
        self.nslots = max_lag + 2
        self.push = push or DensePush()
        self.codec = codec or Codec()  # of the pushes received
        self.pull_codec = pull_codec or Codec()  # of the parameters sent back
        self.owned = {b.index: OwnedBucket(b, optimizer, device, pin, self.nslots) for b in buckets}
        self._others = [r for r in range(comm.size) if r != comm.rank]  # whose pushes come
        pool_mb = settings().ps_push_pool_mb  # GOSSIPGRAD_PS_PUSH_POOL_MB
        self.pool_bytes = PUSH_POOL_BYTES if pool_mb is None else pool_mb << 20  # read lazily
        self._staged: dict[int, Any] = {}
        self._wires: dict[int, torch.Tensor] = {}
        self._replicas: dict[int, torch.Tensor] = {}  # lossy pulls: what the workers hold
        self._copy_replicas()

    # -- the step's side ---------------------------------------------------------------
    def open(self, step: int) -> None:
        """Post step ``step``'s push receives for every owned bucket (idempotent).
        Precondition: update ``step - max_lag - 2`` has been applied (its slot is free)."""
        for ob in self.owned.values():
            slot = ob.slots[step % self.nslots]
            if slot.step == step:
                continue
            assert slot.step < 0, f"bucket {ob.index}: push slot of step {slot.step} in use"
            self._open_slot(ob, slot, step)

    def _open_slot(self, ob: OwnedBucket, slot: _Slot, step: int) -> None:
        slot.step, slot.contributed, slot.folded = step, False, 0
        if slot.acc is None:
            slot.acc, slot.own = torch.empty_like(ob.master), torch.empty_like(ob.master)
            nbytes = ob.master.numel() * ob.master.element_size()
            batch = push_pool(nbytes, self.comm.size, self.pool_bytes)
            slot.pool = [torch.empty_like(ob.master) for _ in range(batch)]
            slot.recv = [None] * batch
        if not self._others:
            return
        key = request_key(PUSH_RECV, ob.index, step % self.nslots)
        self.thread.submit(
            key,
            lambda: self._post_batch(ob, slot, Pending(slot.acc)),
            eager=not ob.master.is_cuda,
        )

    def _post_batch(self, ob: OwnedBucket, slot: _Slot, pending: Pending) -> Pending:
        """Post the receives of the next batch of the other ranks' pushes into the pool;
        unless it is the last batch, chain the sum of it and the post of the one after."""
        tag = Tag.PS_PUSH + ob.index
        batch = self._others[slot.folded : slot.folded + len(slot.pool)]
        pending.requests = []
        for i, src in enumerate(batch):
            buf = slot.pool[i]
            if self.stager.staging(buf) or not self.codec.in_place:
                if slot.recv[i] is None:
                    wire = self.codec.wire_like(buf)
                    staged = self.stager.staging(wire)
                    slot.recv[i] = self.stager.empty_like(wire) if staged else wire
                buf = slot.recv[i]
            ctx = WaitContext("sent nothing", src, tag, slot.step)
            pending.requests.append(self.comm.irecv(buf, src, tag, ctx))
        slot.batch = list(zip(batch, pending.requests, strict=True))
        last = slot.folded + len(batch) >= len(self._others)
        pending.then = None if last else (lambda p: self._next_batch(ob, slot, p))
        return pending

    def _next_batch(self, ob: OwnedBucket, slot: _Slot, pending: Pending) -> None:
        """A batch has arrived (the communication thread's stage): sum it, post the next."""
        self._fold(ob, slot)
        self._post_batch(ob, slot, pending)

    def _fold(self, ob: OwnedBucket, slot: _Slot) -> None:
        """Decode the batch just received and add it to the slot's sum, in rank order."""
        n = min(len(slot.pool), len(self._others) - slot.folded)
        for i in range(n):
            if slot.recv[i] is not None:
                wire = self.stager.incoming(slot.recv[i], slot.pool[i])
                slot.pool[i].copy_(self.codec.decode(wire, slot.pool[i], ob.index))
        with torch.no_grad():
            parts = slot.pool[:n]
            if slot.folded == 0:  # the first push starts the sum (one pass, not zero + add)
                slot.acc.copy_(parts[0])
                parts = parts[1:]
            self.push.reduce_(slot.acc, parts)
        slot.folded += n

    def contribute(self, step: int, hyper: list[dict[str, Any]]) -> None:
        """This rank's own gradients of ``step`` (read from the owned buckets' ``grads``)
        and the hyperparameters of ``step``'s update, for every owned bucket."""
        self.open(step)
        for ob in self.owned.values():
            slot = ob.slots[step % self.nslots]
            slot.own.copy_(ob.bucket.grads)
            slot.hyper = [dict(hyper[j]) for j in ob.group_of]
            slot.contributed = True

    # -- progress ------------------------------------------------------------------------
    def service(self) -> bool:
        """Apply every update whose pushes are all in, in step order; True if any was."""
        applied = False
        for ob in self.owned.values():
            while self._ready(ob):
                self._update(ob)
                applied = True
        return applied

    def _ready(self, ob: OwnedBucket) -> bool:
        slot = ob.slots[ob.version % self.nslots]
        if slot.step != ob.version or not slot.contributed:
            return False
        if not all(self.thread.done(k) for k in ob.sending):
            return False  # the previous version is still being read by its sends
        key = request_key(PUSH_RECV, ob.index, ob.version % self.nslots)
        return not self._others or self.thread.done(key)

    def missing_pushes(self, index: int) -> list[int]:
        """The ranks whose push of owned bucket ``index``'s oldest pending update has not
        arrived, as far as the communication thread has seen (never tests a request)."""
        ob = self.owned[index]
        slot = ob.slots[ob.version % self.nslots]
        if slot.step != ob.version or not self._others:
            return []
        if self.thread.done(request_key(PUSH_RECV, index, ob.version % self.nslots)):
            return []
        batch = [src for src, r in slot.batch if not getattr(r, "done", False)]
        return batch + self._others[slot.folded + len(slot.batch) :]

    def _update(self, ob: OwnedBucket) -> None:
        slot = ob.slots[ob.version % self.nslots]
        if self._others:
            self._fold(ob, slot)  # the last batch
            ob.grad.copy_(slot.acc)
        else:
            ob.grad.zero_()
        with torch.no_grad():
            self.push.reduce_(ob.grad, [slot.own])
            ob.grad.div_(self.comm.size)
        for group, hyper in zip(ob.optimizer.param_groups, slot.hyper, strict=True):
            group.update(hyper)
        ob.optimizer.step()
        slot.step, slot.contributed = -1, False
        ob.version += 1
        self._send_master(ob)

    def published(self, index: int) -> torch.Tensor:
        """The values of owned bucket ``index``'s latest version as every worker holds
        them: the master itself, or with a lossy pull codec the replica (what the deltas
        sent so far add up to, on every rank alike)."""
        return self._replicas.get(index, self.owned[index].master)

    def _send_master(self, ob: OwnedBucket) -> None:
        """Post the new version's parameters to every other rank. With a lossy pull codec
        the master stays float32 and what travels is its change since what the workers
        hold, ``master - replica`` (small next to the parameters, so a cast loses little
        of it, and what it loses is sent with the next version's change); the replica moves
        by the decoding of exactly that, as every worker's copy does."""
        buf = ob.master
        if not self.pull_codec.lossless and self.comm.size > 1:
            replica = self._replicas[ob.index]
            wire = self._wires.get(ob.index)
            if wire is None:
                wire = self._wires[ob.index] = self.pull_codec.wire_like(buf)
            buf = self.pull_codec.encode_(ob.master - replica, wire, ob.index)
            replica.add_(self.pull_codec.decode(buf, replica, ob.index))
        elif not self.pull_codec.in_place:
            wire = self._wires.get(ob.index)
            if wire is None:
                wire = self._wires[ob.index] = self.pull_codec.wire_like(buf)
            buf = self.pull_codec.encode_(buf, wire, ob.index)
        if self.stager.staging(buf):
            buf = self.stager.outgoing(buf, self._staged, ob.index)
        self.stager.ready(buf)  # a device master goes to MPI after the update's kernels
        tag = Tag.PS_PULL + ob.index
        ob.sending = []
        for dst in range(self.comm.size):
            if dst == self.comm.rank:
                continue
            key = request_key(PULL_SEND, ob.index, 0, dst)
            ctx = WaitContext("received nothing", dst, tag, ob.version - 1)
            self.thread.submit(
                key,
                lambda dst=dst, ctx=ctx: Pending(buf, [self.comm.isend(buf, dst, tag, ctx)]),
                eager=not buf.is_cuda,
            )
            ob.sending.append(key)

    def quiet(self) -> bool:
        """True when no request of the server is in flight (every send completed)."""
        return all(self.thread.done(k) for ob in self.owned.values() for k in ob.sending)

    # -- state -------------------------------------------------------------------------
    def reset_(self, step: int) -> None:
        """Masters <- the model's parameters, clocks <- ``step`` (after loading a model).
        Precondition: nothing in flight (after a drain)."""
        for ob in self.owned.values():
            ob.load_from_model_()
            ob.version = step
            for slot in ob.slots:
                slot.step, slot.contributed = -1, False
        self._copy_replicas()  # the model's values are what every rank holds now

    def _copy_replicas(self) -> None:
        """Lossy pulls: replica <- master (every rank holds the model's values)."""
        if not self.pull_codec.lossless and self.comm.size > 1:
            self._replicas = {i: ob.master.clone() for i, ob in self.owned.items()}

    def state_dict(self) -> dict[str, Any]:
        """The owned buckets' optimizer states (plain tensors), by bucket index."""
        return {
            "buckets": sorted(self.owned),
            "numel": [self.owned[b].bucket.numel for b in sorted(self.owned)],
            "optimizers": [self.owned[b].optimizer.state_dict() for b in sorted(self.owned)],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved; ValueError if the shards differ (another
        size, ``--bucket-mb`` or model)."""
        mine = {
            "buckets": sorted(self.owned),
            "numel": [self.owned[b].bucket.numel for b in sorted(self.owned)],
        }
        if [state.get("buckets"), state.get("numel")] != [mine["buckets"], mine["numel"]]:
            raise ValueError(
                f"rank {self.comm.rank}: the checkpoint's ps shards (buckets "
                f"{state.get('buckets')}) are not this run's ({mine['buckets']}); "
                "resume with the same number of ranks, --bucket-mb and model"
            )
        for b, sd in zip(mine["buckets"], state["optimizers"], strict=True):
            self.owned[b].optimizer.load_state_dict(sd)
