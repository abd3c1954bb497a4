"""``--strategy ps``: a sharded parameter server colocated with the workers, with a
stale-synchronous slack (GeePS; Cui et al. 2016).

    mpiexec -n 4 gossipgrad train --strategy ps                 # synchronous (slack 0)
    mpiexec -n 8 gossipgrad train --strategy ps --slack 2       # up to 2 steps stale

    opt = gossipgrad.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model,
                                          comm, strategy="ps", slack=0)
    # ... the usual zero_grad / forward / backward / opt.step() loop

Every rank is a worker and serves the buckets it owns (:mod:`gossipgrad.engine.ps.shards`:
bucket-aligned, balanced by bytes; buckets are at most 1/size of the model, and a parameter
larger than that is split into parts that different ranks own, as servers shard a large
variable, when the optimizer updates each element on its own:
:func:`gossipgrad.engine.optim.updates_elementwise`). Per
step t and bucket b:

- backward: as soon as b's gradients are ready, the worker pushes them to b's owner
  (``Isend``, overlapped with the rest of backward, from a post-accumulate-grad hook);
- ``step()``: the owner adds its own gradient; when every push of step t has arrived it sums
  them (in rank order), divides by size, steps b's optimizer on its master copy (state only
  there) and sends the parameters back (:class:`gossipgrad.engine.ps.server.ShardServer`);
- next forward: a pre-hook on the first module that uses b waits until the rank's copy of b
  is recent enough: server clock >= t + 1 - max_lag (``max_lag`` 0: exactly the update of
  step t, which makes it allreduce-SGD on the mean gradient).

Bytes per step: every bucket's gradient once to its owner and its parameters once to each
other rank, a mean over ranks of 2 (size - 1) / size of the model (ring allreduce's).

Memory per rank, beyond the model and its gradients: master copies and optimizer state of
the owned buckets (about 1/size of the model each), and per owned bucket ``max_lag + 2``
push slots (a sum, the owner's own push and a pool of receive buffers:
:mod:`gossipgrad.engine.ps.server`); with ``max_lag`` > 0 also ``max_lag + 1`` send and receive
buffers per other bucket (a fast rank's pushes and pulls stay in flight while it runs ahead).

With ``max_lag`` > 0 a rank computes on whatever recent version has arrived, so results
depend on timing; with 0 they do not. Parameters must be read through their own module's
forward (as with gossip's overlapped ``mix="param"``), or pass ``overlap=False``, which waits
for every bucket at the end of ``step()`` (bit-identical results).
"""

# Over 300 lines on purpose: one class holds ps's step protocol (pushes from backward
# hooks, pulls before forward, the shard server's turn, the factor-path layers) so that
# its ordering can be read in one place; the server and worker halves live apart.

from __future__ import annotations

import logging
import sys
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Transport
from gossipgrad.engine.bucket.factors import Router, make_factor_path
from gossipgrad.engine.buckets import BucketLayout, install_forward_waits
from gossipgrad.engine.commthread import CommThread
from gossipgrad.engine.consensus import (
    average_buffers_,
    broadcast_parameters_,
    consensus_distance,
    verify_identical,
)
from gossipgrad.engine.offload import HostOffloadOptimizer
from gossipgrad.engine.optim import rebuild, updates_elementwise
from gossipgrad.engine.protocol import STATE_KEY, WrappedOptimizer
from gossipgrad.engine.ps.server import DensePush, ShardServer, hyperparameters
from gossipgrad.engine.ps.shards import (
    assign_owners,
    bytes_sent_by_rank,
    check_parts,
    ps_bucket_cap,
)
from gossipgrad.engine.ps.worker import ShardWorker
from gossipgrad.options import ExchangeOptions

log = logging.getLogger(__name__)


class ParameterServerOptimizer(WrappedOptimizer):
    """The distributed optimizer of ``strategy="ps"`` (build it through
    ``gossipgrad.DistributedOptimizer(..., strategy="ps")``).

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters, without state;
            each owner builds ``type(optimizer)(groups, **optimizer.defaults)`` over its
            buckets (a :class:`HostOffloadOptimizer` puts those in host memory). Its
            ``param_groups`` stay the ones to set the learning rate on: a step's update
            uses the values they hold when its owner calls ``step()``.
        model: parameters are broadcast from rank 0 and verified; gradients and values
            become views into buckets.
        comm: the communicator.
        options: strategy ps; ``max_lag`` (slack), ``bucket_mb`` (at most 1/size of the model
            is used, see :func:`ps_bucket_cap`), ``overlap``; topology, seed and rotate only
            build ``schedule`` (checked for agreement, never used for messages).
        stager: how device tensors reach MPI (default: direct on CPU).
        push: what a worker sends per bucket and how the owner reduces it (default
            :class:`DensePush`, the gradient); the plug for another encoding.
    """

    # Over 60 lines on purpose: layout, owners, server, replicas and hooks are built in an order
    # each step relies on.
    def __init__(
        self,
        optimizer: torch.optim.Optimizer | HostOffloadOptimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions,
        *,
        stager: Stager | None = None,
        push: DensePush | None = None,
    ) -> None:
        opts = options
        host = isinstance(optimizer, HostOffloadOptimizer)
        base = optimizer.original if host else optimizer
        if base.state:
            raise ValueError("--strategy ps needs an optimizer that has not stepped yet")
        super().__init__(base, model, comm, opts)
        self.max_lag = opts.slack  # the stale-synchronous slack
        self.push_codec = make_codec(opts.wire, opts.feedback)
        self.pull_codec = make_codec(opts.wire, feedback=False)  # pulls are deltas: see published
        self.wire_codecs = (self.push_codec, self.pull_codec)
        params = list(model.parameters())
        self._split(params, stager, host)
        broadcast_parameters_(model, comm)
        verify_identical(model, comm)
        self.layout.bind_grads_()
        self.layout.bind_params_()
        self.owners = assign_owners([b.nbytes for b in self.layout.buckets], comm.size)
        self.stager = stager or Stager(cuda_aware=False)
        self.communicates = comm.size > 1
        self.overlap = opts.overlap and self.communicates
        self._thread = self._start_thread() if self.communicates else None
        device = params[0].device
        server_device = torch.device("cpu") if host else device
        self.push = push or DensePush()
        owned = [b for b in self.layout.buckets if self.owners[b.index] == comm.rank]
        self.server = ShardServer(
            owned,
            base,
            comm,
            self._thread,
            self.stager,
            self.max_lag,
            server_device,
            pin=host and device.type == "cuda",
            push=self.push,
            codec=self.push_codec,
            pull_codec=self.pull_codec,
        )
        self.rank_states = {"ps": self.server}  # the trainer checkpoints each rank's shard
        if not self.push_codec.lossless:  # error-feedback residuals: this rank's own
            self.rank_states["codec_push"] = self.push_codec
        if self.factors:
            self.rank_states.update(self.factors.codec_states)
        self.worker = ShardWorker(
            self.layout,
            self.owners,
            self.server,
            comm,
            self._thread,
            self.stager,
            self.max_lag,
            self.push,
            push_codec=self.push_codec,
            pull_codec=self.pull_codec,
        )
        nb = len(self.layout.buckets)
        self._fresh, self._ready, self._pushed = [False] * nb, [0] * nb, [False] * nb
        self._hooks: list[Any] = []
        if self.overlap:
            self._bucket_of = self.layout.buckets_of()  # a split parameter: several
            params_once = {id(p): p for b in self.layout.buckets for p in b.params}
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._grad_ready) for p in params_once.values()
            ]
            self._hooks += self._install_forward_waits(model)
        if comm.rank == 0:
            mine = sum(b.nbytes for b in owned)
            log.info(
                "ps: %d buckets over %d ranks (rank 0 serves %.2f MB of %.2f MB), max-lag %d",
                nb,
                comm.size,
                mine / 1e6,
                self.layout.nbytes / 1e6,
                self.max_lag,
            )

    def _split(self, params: list[torch.nn.Parameter], stager: Stager | None, host: bool) -> None:
        """Poseidon's hybrid: Linear weights sent as factors (``self.factors``, updated on
        every rank by ``self.local_optimizer``) and the buckets the servers hold."""
        self.factors = make_factor_path(
            self.model, self.comm, self.options, self.schedule, stager, keep_matrices=True
        )
        local = self.factors.weight_ids if self.factors else frozenset()
        nbytes = sum(
            p.numel() * p.element_size() for p in params if p.requires_grad and id(p) not in local
        )
        cap = ps_bucket_cap(nbytes, self.comm.size, self.options.bucket_cap_bytes)
        split = updates_elementwise(self.optimizer)
        if split:
            sizes = [p.numel() * p.element_size() for p in params if id(p) not in local]
            check_parts(sizes, cap, self.comm.size, nbytes)
        self.layout = BucketLayout(params, cap, exclude=local, split=split)
        whole = max((b.nbytes for b in self.layout.buckets), default=0)
        if not split and whole > cap and self.comm.rank == 0:
            log.info(
                "ps: %s is not known to update each element on its own, so a parameter "
                "larger than a server's share stays whole (one owner serves %.1f MB of it)",
                type(self.optimizer).__name__,
                whole / 1e6,
            )
        self.local_optimizer, self._local_group_of = (
            _local_optimizer(self.optimizer, local, host) if local else (None, [])
        )

    def _start_thread(self) -> CommThread:
        """The polling thread. Its waits (ps_worker) have the deadline, from when a rank
        needs the data, and say which peers it waits for; a request's own, from when it was
        posted (pushes are posted a step ahead), is only the backstop."""
        finisher: Any = Transport(self.comm, self.stager)  # completion only: nothing to mix
        if self.factors:
            finisher = Router(finisher, self.factors)
        thread = CommThread(finisher, 2 * self.comm.timeout, name="gossipgrad-ps")
        if self.factors:
            self.factors.bind(thread if self.overlap else None, lambda: self.step_count)
        return thread

    def _local_step(self) -> None:
        """Wait for the factor-path layers' mean gradients and update them here."""
        self.factors.post_all()  # those no backward hook has posted
        self.factors.wait_all()
        for inner, j in zip(self.local_optimizer.param_groups, self._local_group_of, strict=True):
            inner.update(hyperparameters(self.optimizer.param_groups[j]))
        self.local_optimizer.step()
        self.factors.end_step()

    @property
    def bucket_count(self) -> int:  # type: ignore[override]
        return len(self.layout.buckets)

    @property
    def factor_table(self) -> list[dict[str, Any]] | None:
        """The sufficient-factor decision per Linear layer (None: none, or not made yet)."""
        return self.factors.table() if self.factors else None

    @property
    def parameter_clocks(self) -> list[int]:
        """Per bucket, the server clock (updates applied) of the values in the model now.
        During step t's forward every bucket used so far is at >= t - max_lag."""
        return list(self.worker.have)

    # -- the step --------------------------------------------------------------------
    @property
    def module_for_forward(self) -> torch.nn.Module:
        return self.model

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradient buckets (after the last step's pushes have left them) and post
        this step's push receives of the owned buckets; ``set_to_none`` is ignored."""
        self.worker.wait_direct_pushes()
        for b in self.layout.buckets:
            b.grads.zero_()
        if self.factors:
            self.factors.zero_grad_()
        self.server.open(self.step_count)
        self._ready = [0] * len(self.layout.buckets)
        self._pushed = [False] * len(self.layout.buckets)

    def step(self, closure: Any = None) -> Any:
        """Push what backward has not pushed, hand this rank's gradients and learning rate
        to its own shard, post the pulls of the next version; returns the closure's loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if not self.layout.grads_bound():
            raise RuntimeError(
                "gradients were detached from their buckets (was "
                "zero_grad(set_to_none=True) called on the inner optimizer?); "
                "call zero_grad() on the DistributedOptimizer instead"
            )
        t, worker = self.step_count, self.worker
        for b in self.layout.buckets:
            if not self._pushed[b.index]:
                self._push(b.index)
        if self.factors:
            self._local_step()
        self.server.contribute(t, [hyperparameters(g) for g in self.optimizer.param_groups])
        for b in self.layout.buckets:  # frees the ring slot the next pull goes into
            worker.refresh(b.index, t - self.max_lag)
            if worker.pull_bufs[b.index]:
                worker.post_pull(b.index, t + 1)
        self.step_count = worker.step = t + 1
        self._fresh = [False] * len(self.layout.buckets)
        self.server.service()
        if not self.overlap:
            for b in self.layout.buckets:
                worker.refresh(b.index, self.step_count - self.max_lag)
        return loss

    def _push(self, index: int) -> None:
        self._pushed[index] = True
        self.worker.push_(index, self.step_count)

    def _grad_ready(self, p: torch.Tensor) -> None:
        for b in self._bucket_of[id(p)]:
            self._ready[b] += 1
            if self._ready[b] == len(self.layout.buckets[b].params):
                self._push(b)

    def _install_forward_waits(self, model: torch.nn.Module) -> list[Any]:
        """A forward pre-hook on every module that owns parameters: before its first use in
        a step, bring each of its buckets to clock >= step - max_lag."""
        return install_forward_waits(model, self._bucket_of, self._before_use)

    def _before_use(self, buckets: list[int]) -> None:
        self.server.service()
        for b in buckets:
            if not self._fresh[b]:
                self.worker.refresh(b, self.step_count - self.max_lag)
                self._fresh[b] = True

    # -- whole-model operations -------------------------------------------------------
    def drain(self) -> None:
        """Collective: complete every update up to this step and bring every bucket to it;
        afterwards nothing is in flight and all ranks hold the same parameters."""
        for b in self.layout.buckets:
            self.worker.refresh(b.index, self.step_count)
        self.worker.wait(
            self.worker.quiet,
            lambda: (
                "the last parameter and gradient sends have not completed; is every rank alive?"
            ),
        )

    def synchronize(self) -> None:
        """Drain, then average floating buffers (BatchNorm statistics, which ps does not
        share) and check that parameters and buffers are identical on every rank."""
        self.drain()
        average_buffers_(self.model, self.comm)
        verify_identical(
            self.model, self.comm, when=f"at step {self.step_count} under --strategy ps"
        )

    def consensus_distance(self) -> float:
        """Measured after a drain: 0.0 when every rank holds the server's parameters."""
        self.drain()
        return consensus_distance(self.model, self.comm)

    def bytes_sent_per_step(self) -> float:
        """The mean over ranks (ring allreduce's 2 (size-1)/size of the served model, plus
        the factor-path layers' all-gathers)."""
        local = self.factors.bytes_sent() if self.factors else 0.0
        wire = sum(self.push_codec.wire_nbytes(b.grads) for b in self.layout.buckets)
        return self.options.spec.bytes_per_step(wire, self.comm.size) + local

    def bytes_sent_by_rank(self) -> list[int]:
        """What each rank sends per step (it depends on how much the rank owns)."""
        local = round(self.factors.bytes_sent()) if self.factors else 0
        return [
            n + local
            for n in bytes_sent_by_rank(
                [b.nbytes for b in self.layout.buckets], self.owners, self.comm.size
            )
        ]

    def close(self) -> None:
        """Drain, remove the hooks, stop the thread. When the job is failing (a wait here
        failed, or close is called while an exception is on its way out, as from the
        trainer's ``finally``) nothing is waited for: the messages still outstanding and
        their peers are logged instead (the failure itself may be a collective's, which
        cannot say which rank is missing)."""
        try:
            if self.worker.broken or sys.exc_info()[0] is not None:
                self.worker.report_outstanding()
            else:
                self.drain()
        finally:
            for h in self._hooks:
                h.remove()
            self._hooks = []
            if self._thread is not None:
                self._thread.close()
                self._thread = None
            if self.factors:
                self.factors.close()

    def own_state(self) -> dict[str, Any]:
        """The step, this rank's shard (``"ps"``: optimizer state of the buckets it owns)
        and the factor-path layers' optimizer (the same on every rank). Call
        :meth:`synchronize` first on every rank for a state at one step."""
        state = super().own_state()
        if self.local_optimizer is not None:
            state["factor_optimizer"] = self.local_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a state (:meth:`state_dict`'s, or a plain torch optimizer's); the model must
        already hold the parameters of the step it was saved at (they become the masters,
        at the clock of ``step_count``)."""
        own = state.get(STATE_KEY, {})
        if "step" in own:
            self.step_count = int(own["step"])
        self.server.reset_(self.step_count)
        self.worker.reset(self.step_count)
        self.worker.step = self.step_count
        super().load_state_dict(state)
        if self.local_optimizer is not None and "factor_optimizer" in own:
            self.local_optimizer.load_state_dict(own["factor_optimizer"])


def _local_optimizer(
    base: torch.optim.Optimizer, weights: frozenset[int], host: bool
) -> tuple[torch.optim.Optimizer | HostOffloadOptimizer, list[int]]:
    """``type(base)`` over the factor-path weights, in their user groups' settings (copied
    from those groups before every step, so a learning-rate schedule applies), and the index
    of each of its groups among ``base``'s."""
    groups, group_of = [], []
    for j, g in enumerate(base.param_groups):
        mine = [p for p in g["params"] if id(p) in weights]
        if mine:
            groups.append({**hyperparameters(g), "params": mine})
            group_of.append(j)
    local = rebuild(base, groups)
    return (HostOffloadOptimizer(local) if host else local), group_of
