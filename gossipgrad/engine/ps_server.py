"""The server half of ``--strategy ps``: the buckets this rank owns, their master copies,
their optimizers, and the per-bucket push/pull protocol of an owner.

Per owned bucket ``b`` and step ``v`` (:class:`ShardServer`):

1. ``open(v)``: post a receive for step v's gradient push from every other rank
   (``Tag.PS_PUSH + b``) into slot ``v mod (max_lag + 2)``.
2. ``contribute(v, ...)``: copy this rank's own gradient of step v into the slot, with the
   optimizer hyperparameters (learning rate ...) this rank's param groups held at step v.
3. ``service()``: when every push of step v has arrived (and the parameters of update v-1
   have reached every worker), sum the gradients in rank order, divide by ``size``, step the
   bucket's optimizer on the master copy (clock v -> v+1) and send the master to every
   other rank (``Tag.PS_PULL + b``). Updates apply in step order.

The optimizer: one ``torch.optim`` optimizer per owned bucket, built as
``type(optimizer)(groups, **optimizer.defaults)`` over master tensors of the same shapes as
the model's parameters (``groups``: the user's param groups restricted to the bucket, with
their hyperparameters), so its state exists only at the owner, 1/size of the model's on
average. Master copies live on the model's device, or in (pinned) host memory with
``--offload optimizer``.

Only the training thread calls these methods; the communication thread only polls requests.
The sum is in rank order, so a run is reproducible; with ``max_lag`` 0 the update is the one
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

log = logging.getLogger(__name__)

PUSH_RECV, PULL_SEND, PUSH_SEND, PULL_RECV = 1, 2, 3, 4


def request_key(kind: int, bucket: int, slot: int, peer: int = 0) -> int:
    """A communication-thread key for one request: kind, bucket, ring slot and peer."""
    return ((kind * 1_000_003 + bucket) * 1_009 + slot) * 1_000_003 + peer


class DensePush:
    """The dense push: a worker sends the bucket's gradient; the owner sums them.

    ``payload(bucket, grads)``: the tensor a worker sends (read until the send completes);
    ``receive_buffer(bucket, like)``: what the owner receives one push into;
    ``reduce_(out, parts)``: ``out`` <- mean of the pushes ``parts`` (one per rank, in rank
    order, this rank's own included), in place.
    """

    def payload(self, bucket: Bucket, grads: torch.Tensor) -> torch.Tensor:
        return grads

    def receive_buffer(self, bucket: Bucket, like: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(like)

    def reduce_(self, out: torch.Tensor, parts: list[torch.Tensor]) -> None:
        out.copy_(parts[0])
        for part in parts[1:]:
            out.add_(part.to(out.device))
        out.div_(len(parts))


@dataclass
class _Slot:
    """One step's pushes of one owned bucket."""

    step: int = -1
    parts: list[torch.Tensor] = field(default_factory=list)  # per rank, own one included
    recv: list[torch.Tensor | None] = field(default_factory=list)  # staged receive buffers
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
                m.copy_(p.detach())


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
        slot.step, slot.contributed = step, False
        if not slot.parts:
            slot.parts = [torch.empty_like(ob.master) for _ in range(self.comm.size)]
            slot.recv = [None] * self.comm.size
        tag = Tag.PS_PUSH + ob.index
        for src in range(self.comm.size):
            if src == self.comm.rank:
                continue
            buf = slot.parts[src]
            if self.stager.staging(buf) or not self.codec.in_place:
                if slot.recv[src] is None:
                    wire = self.codec.wire_like(buf)
                    slot.recv[src] = (
                        self.stager.empty_like(wire) if self.stager.staging(wire) else wire
                    )
                buf = slot.recv[src]
            ctx = WaitContext("sent nothing", src, tag, step)
            key = request_key(PUSH_RECV, ob.index, step % self.nslots, src)
            self.thread.submit(
                key,
                lambda buf=buf, src=src, ctx=ctx: Pending(
                    buf, [self.comm.irecv(buf, src, tag, ctx)]
                ),
                eager=not buf.is_cuda,
            )

    def contribute(self, step: int, hyper: list[dict[str, Any]]) -> None:
        """This rank's own gradients of ``step`` (read from the owned buckets' ``grads``)
        and the hyperparameters of ``step``'s update, for every owned bucket."""
        self.open(step)
        for ob in self.owned.values():
            slot = ob.slots[step % self.nslots]
            slot.parts[self.comm.rank].copy_(ob.bucket.grads)
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
        nslot = ob.version % self.nslots
        return all(
            self.thread.done(request_key(PUSH_RECV, ob.index, nslot, src))
            for src in range(self.comm.size)
            if src != self.comm.rank
        )

    def _update(self, ob: OwnedBucket) -> None:
        slot = ob.slots[ob.version % self.nslots]
        for src, staged in enumerate(slot.recv):
            if staged is not None and src != self.comm.rank:
                part = slot.parts[src]
                wire = self.stager.incoming(staged, part)
                part.copy_(self.codec.decode(wire, part, ob.index))  # summed in float32 below
        with torch.no_grad():
            self.push.reduce_(ob.grad, slot.parts)
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
