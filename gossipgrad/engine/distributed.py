"""The library API: wrap a ``torch.optim`` optimizer so each ``step()`` also mixes.

Complete example (run as ``mpiexec -n 4 python example.py``, or plainly for one rank)::

    import torch
    import gossipgrad

    comm = gossipgrad.init()
    model = torch.nn.Linear(8, 2)
    opt = gossipgrad.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model, comm)  # gossip, mix="param"
    for _ in range(10):
        x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    opt.synchronize()  # global average: one consensus model on every rank

``mix="grad"`` averages gradient buckets with the step's peer before the optimizer steps;
``mix="param"`` steps first, then averages parameter buckets. With ``overlap=True`` (and
staleness 0) the exchange runs on the communication thread: a gradient bucket leaves as
soon as backward has produced its last gradient, and ``step()`` waits for it; a parameter
bucket leaves right after the optimizer step, and is waited for by a forward pre-hook of
the first module that uses one of its parameters at the next step, so the exchange hides
behind the next forward. Parameters must therefore be read through their own module's
``forward`` (not, e.g., as ``other_module.weight`` from a different module); otherwise pass
``overlap=False``. Overlapped and blocking exchange give bit-identical results.
Staleness 1 completes the exchange posted at step t at step t+1 and applies the mixing
correction ``(peer's - own) / 2`` computed from step t's values, which keeps the mean over
ranks exact. With ``mix="grad"`` (staleness 0) Linear layers' weight gradients may travel
as sufficient factors, ``sufficient_factors="auto"`` (:mod:`gossipgrad.engine.factors`).
``max_lag=S`` (S >= 1) lets frames lag up to S steps and a slow rank skip
compute to catch up (:mod:`gossipgrad.engine.lagged`; call ``behind()`` before the forward
and ``skip_step()`` instead of ``step()`` when it is True).

Gradient mixing never pulls the ranks' parameters together, so they drift apart; gossip
therefore estimates the consensus distance every ``monitor_every`` steps (one allreduce of
a few floats, :mod:`gossipgrad.engine.monitor`) and, with ``sync="adaptive"`` (the default
for ``mix="grad"``), averages globally when it exceeds ``sync_threshold``.
"""

# Over 300 lines on purpose: the one class that holds a step's protocol (buckets, hooks, thread,
# stale and lagged paths, membership changes); split, its invariants would span files.

from __future__ import annotations

import logging
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Tag
from gossipgrad.comm.exchange import Exchange, Pending, make_exchange
from gossipgrad.comm.lagged import HEADER_BYTES
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.engine.buckets import BucketLayout, install_forward_waits
from gossipgrad.engine.commthread import CommThread
from gossipgrad.engine.consensus import (
    average_parameters_,
    broadcast_parameters_,
    consensus_distance,
    verify_identical,
)
from gossipgrad.engine.factors import Router, make_factor_path
from gossipgrad.engine.lagged import LaggedMixer
from gossipgrad.engine.monitor import ConsensusMonitor
from gossipgrad.engine.wrapped import WrappedOptimizer
from gossipgrad.options import ExchangeOptions, Mix, Strategy, exchange_options

log = logging.getLogger(__name__)

PARAM_WINDOW = 2
"""Parameter buckets on the wire at once (``CommThread`` window). Posted all at once they
interleave on the connection and the first layer's bucket arrives last; in forward order
two at a time, each arrives as early as the link allows."""


class DistributedOptimizer(WrappedOptimizer):
    """Wraps ``optimizer``; ``step()`` = exchange + local step (order set by ``mix``).

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters.
        model: the module being trained (its parameters are broadcast from rank 0 and
            verified identical on construction).
        comm: the communicator (``gossipgrad.init()``).
        options: the exchange (:class:`gossipgrad.options.ExchangeOptions`: strategy
            ``gossip``, ``allreduce``, ``local`` or ``ps``, topology, mix, staleness, sync_every,
            sync, sync_threshold, monitor_every, bucket_mb, overlap, seed, rotate,
            sufficient_factors); keyword arguments override its fields, so
            ``DistributedOptimizer(opt, model, comm, strategy="allreduce")`` works too.
            With ``overlap`` (and staleness 0) gradient buckets start from backward hooks
            and parameter buckets are waited for by forward pre-hooks; with staleness 1
            every bucket is posted at ``step()`` and driven by the communication thread
            while the next forward and backward run.
        stager: how device tensors reach MPI (default: direct on CPU).
    """

    def __new__(
        cls,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions | None = None,
        *,
        stager: Stager | None = None,
        **overrides: Any,
    ) -> Any:
        """``strategy="ps"`` builds :class:`gossipgrad.engine.ps.ParameterServerOptimizer`
        (same interface, not a subclass); every other strategy this class."""
        if (
            cls is DistributedOptimizer
            and exchange_options(options, overrides).strategy is Strategy.PS
        ):
            from gossipgrad.engine.ps import ParameterServerOptimizer

            return ParameterServerOptimizer(
                optimizer, model, comm, options, stager=stager, **overrides
            )
        return super().__new__(cls)

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions | None = None,
        *,
        stager: Stager | None = None,
        **overrides: Any,
    ) -> None:
        opts = exchange_options(options, overrides)
        if opts.strategy.library:
            raise ValueError(
                f"--strategy {opts.strategy} runs through its library adapter: "
                "build it with gossipgrad.engine.factory.make_distributed"
            )
        self.optimizer, self.model, self.options = optimizer, model, opts
        self.strategy, self.mix = opts.strategy, opts.mix
        self.staleness, self.sync_every = opts.staleness, opts.sync_every
        self.step_count = 0
        broadcast_parameters_(model, comm)
        verify_identical(model, comm)
        self._stager = stager
        self._collective = self.strategy is Strategy.ALLREDUCE  # posted in order, by the caller
        self._thread: CommThread | None = None
        # Linear weights that may go as sufficient factors (engine/factors.py) get no bucket.
        self.factors = make_factor_path(
            model, comm, opts, Schedule(comm.size, opts.topology, opts.seed, opts.rotate), stager
        )
        self._bind_layout(self.factors.weight_ids if self.factors else frozenset())
        self._connect(comm)
        self.monitor = ConsensusMonitor(model, comm, opts, self.synchronize, self.wait_parameters)
        self._stale: list[tuple[int, Pending | None, torch.Tensor]] = []  # key, pending, target
        self._stale_bufs: list[tuple[torch.Tensor, torch.Tensor]] = []  # (sent -> mixed, own)
        self._params_inflight: set[int] = set()
        self._hooks: list[Any] = []
        if self.overlap and self.staleness == 0 and self.mix is Mix.GRAD:
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._grad_ready)
                for p in model.parameters()
                if p.requires_grad
            ]
        elif self.overlap and self.staleness == 0:
            self._hooks = self._install_forward_waits(model)
        self.monitor = ConsensusMonitor(model, comm, opts, self.synchronize, self.wait_parameters)

    def _bind_layout(self, exclude: frozenset[int]) -> None:
        """Bucket every trainable parameter not in ``exclude`` (``p.grad``, and ``p.data``
        with ``mix="param"``, become views of the buckets). Built again, once, after the
        first step when sufficient factors hand back the layers they send as matrices."""
        self.layout = BucketLayout(
            list(self.model.parameters()), self.options.bucket_cap_bytes, exclude
        )
        self.layout.bind_grads_()
        if self.mix is Mix.PARAM:
            self.layout.bind_params_()
        self._bucket_of = {id(p): b.index for b in self.layout.buckets for p in b.params}
        self._ready = [0] * len(self.layout.buckets)
        self._submitted = [False] * len(self.layout.buckets)

    def _connect(self, comm: Communicator) -> None:
        """Everything that depends on the ranks: schedule, exchange, lagged mixer,
        communication thread."""
        opts = self.options
        self.comm = comm
        self.schedule = Schedule(comm.size, opts.topology, opts.seed, opts.rotate)
        self.exchange: Exchange = make_exchange(
            self.strategy, comm, self.schedule, self._stager, copy_send=False
        )
        self.communicates = comm.size > 1 and self.strategy is not Strategy.LOCAL
        lagged = opts.max_lag > 0 and self.communicates
        self.lagged = (
            LaggedMixer(
                comm,
                self.schedule,
                self.layout,
                self.mix,
                opts.max_lag,
                self.staleness,
                poll=opts.overlap,
            )
            if lagged
            else None
        )
        self.overlap = opts.overlap and self.communicates and not lagged  # lag: its own poller
        # A window only where a forward waits for buckets in order (and the order is fixed).
        window = PARAM_WINDOW if self.mix is Mix.PARAM and self.staleness == 0 else None
        finisher = Router(self.exchange, self.factors.exchange) if self.factors else self.exchange
        block = comm.policy.block and not self._collective  # a collective posts under the lock
        self._thread = (
            CommThread(finisher, comm.timeout, window, block=block) if self.overlap else None
        )
        if self.factors:
            self.factors.bind(self._thread, lambda: self.step_count)

    # -- membership changes (engine/membership.py) -----------------------------------
    def abandon(self) -> None:
        """After a rank died: stop the communication thread and forget every exchange in
        flight (their communicator is revoked; nothing of them is applied). Parameters keep
        their values, each bucket either mixed or its own; call :meth:`rejoin_` next."""
        if self._thread is not None:
            self._thread.close()
            self._thread = None
        self._params_inflight.clear()
        self._stale = []
        self._submitted = [False] * len(self.layout.buckets)

    def rejoin_(self, comm: Communicator, step: int) -> None:
        """Continue on ``comm`` (the survivors) at ``step`` (agreed: the schedule's position
        must be the same on every rank): a schedule for its size (dissemination when that
        is not a power of two, under ``auto``), a new exchange and thread. No communication;
        the caller follows with a global average. Sufficient factors and a lagged mixer
        cannot follow a membership change (``--on-failure continue`` refuses them)."""
        if self.factors is not None or self.lagged is not None:
            raise RuntimeError("a membership change needs --sufficient-factors off and --max-lag 0")
        self.step_count = step
        self._connect(comm)
        self.monitor.comm = comm
        if not self.overlap:  # e.g. one rank left: no hook may post an exchange
            for h in self._hooks:
                h.remove()
            self._hooks = []

    # -- the step --------------------------------------------------------------------
    @property
    def module_for_forward(self) -> torch.nn.Module:
        """What the forward pass calls: the model itself (DDP's adapter returns its wrapper)."""
        return self.model

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradient buckets (gradients stay views into them; ``set_to_none`` is
        accepted for compatibility and ignored)."""
        for b in self.layout.buckets:
            b.grads.zero_()
        if self.factors:
            self.factors.zero_grad_()
        self._ready = [0] * len(self.layout.buckets)
        self._submitted = [False] * len(self.layout.buckets)

    def step(self, closure: Any = None) -> Any:
        """Mix and take the optimizer step; returns the closure's loss if given."""
        if self.communicates and not self.layout.grads_bound():
            raise RuntimeError(
                "gradients were detached from their buckets (was "
                "zero_grad(set_to_none=True) called on the inner optimizer?); "
                "call zero_grad() on the DistributedOptimizer instead"
            )
        if self.lagged is not None:
            loss = self.lagged.step_(self.step_count, self.optimizer, closure, computed=True)
            self._advance()
            return loss
        if self.mix is Mix.GRAD:
            if self.factors:
                self.factors.post_all()  # those no backward hook has posted
            self._mix_buckets([b.grads for b in self.layout.buckets], Tag.GRAD_BUCKET)
            if self.factors:
                self.factors.wait_all()
            loss = self.optimizer.step(closure)
            if self.factors and self.factors.end_step():  # first step: matrices to buckets
                self._bind_layout(self.factors.weight_ids)
        elif self._thread is not None and self.staleness == 0:
            self.wait_parameters()  # buckets no forward used since the last step
            loss = self.optimizer.step(closure)
            self._post_parameters()
        else:
            loss = self.optimizer.step(closure)
            self._mix_buckets([b.values for b in self.layout.buckets], Tag.PARAM_BUCKET)
        self._advance()
        return loss

    def _advance(self) -> None:
        self.step_count += 1
        if self.sync_every and self.step_count % self.sync_every == 0:
            self.synchronize()
        else:  # every --monitor-every steps: estimate, and average if it is too far
            self.monitor.after_step(self.step_count)

    def behind(self) -> bool:
        """True when a peer is far enough ahead that this rank should skip this step's
        forward and backward and call :meth:`skip_step` (``max_lag >= 1`` only)."""
        return self.lagged is not None and self.lagged.behind(self.step_count)

    def skip_step(self) -> None:
        """This step's exchange without a gradient of this rank's (after :meth:`behind`):
        param mix sends and mixes without an optimizer step; grad mix applies the halves of
        the peers' gradients that have arrived."""
        if self.lagged is None:
            raise RuntimeError("skip_step() needs max_lag >= 1 (--max-lag)")
        self.zero_grad()
        self.lagged.step_(self.step_count, self.optimizer, None, computed=False)
        self._advance()

    def _grad_ready(self, p: torch.Tensor) -> None:
        b = self._bucket_of.get(id(p))
        if b is None:  # a weight sent as sufficient factors
            return
        self._ready[b] += 1
        if self._ready[b] == len(self.layout.buckets[b].params) and self.staleness == 0:
            self._submit(b, self.layout.buckets[b].grads, Tag.GRAD_BUCKET)

    def _install_forward_waits(self, model: torch.nn.Module) -> list[Any]:
        """A forward pre-hook on every module that owns parameters: before it runs, wait
        for the parameter buckets holding them (the first such module does the wait)."""
        return install_forward_waits(model, self._bucket_of, self.wait_parameters)

    def _post_parameters(self) -> None:
        """Hand every parameter bucket to the communication thread, in forward order (the
        layout is in backward order, so the first layer's bucket is the last one)."""
        for b in reversed(self.layout.buckets):
            self._submit(b.index, b.values, Tag.PARAM_BUCKET)
            self._params_inflight.add(b.index)

    @property
    def parameters_in_flight(self) -> int:
        """Parameter buckets posted after the last step and not yet mixed in."""
        return len(self._params_inflight)

    def wait_parameters(self, buckets: list[int] | None = None) -> None:
        """Wait until the parameter exchange of ``buckets`` (default: all in flight) has
        been mixed into the parameters. A no-op unless ``mix="param"`` is overlapped."""
        if not self._params_inflight:
            return
        for i in sorted(self._params_inflight) if buckets is None else buckets:
            if i in self._params_inflight:
                self._thread.wait(i)
                self._params_inflight.discard(i)

    def _submit(self, index: int, buf: torch.Tensor, tag_base: int) -> None:
        self._submitted[index] = True
        step = self.step_count
        self._thread.submit(
            index,
            lambda: self.exchange.start(buf, index, step, tag_base + index),
            eager=not buf.is_cuda,
            collective=self._collective,
        )

    def _mix_buckets(self, bufs: list[torch.Tensor], tag_base: int) -> None:
        if not self.communicates:
            return
        if self.staleness == 1:
            self._mix_stale(bufs, tag_base)
        elif self._thread is not None:
            for i, buf in enumerate(bufs):
                if not self._submitted[i]:  # parameters unused this step: no hook fired
                    self._submit(i, buf, tag_base)
            for i in range(len(bufs)):
                self._thread.wait(i)
        else:
            pending = [
                self.exchange.start(buf, i, self.step_count, tag_base + i)
                for i, buf in enumerate(bufs)
            ]
            for p in pending:
                self.exchange.finish(p)

    def _mix_stale(self, bufs: list[torch.Tensor], tag_base: int) -> None:
        """Apply last step's exchange as a correction, then post this step's (on the
        communication thread, which drives it while the next forward and backward run)."""
        for key, pending, target in self._stale:
            mixed, own = self._stale_bufs[key]
            self._complete_stale(key, pending)  # mixed <- mix of own_{t-1} with the peer's
            target.add_(mixed.sub_(own))  # buf_t += (mixed - own)_{t-1}
        self._stale = []
        if [m.shape for m, _ in self._stale_bufs] != [b.shape for b in bufs]:
            self._stale_bufs = [(torch.empty_like(b), torch.empty_like(b)) for b in bufs]
        step = self.step_count
        for i, buf in enumerate(bufs):
            mixed, own = self._stale_bufs[i]
            own.copy_(buf)
            mixed.copy_(buf)
            if self._thread is None:
                self._stale.append((i, self.exchange.start(mixed, i, step, tag_base + i), buf))
            else:
                self._thread.submit(
                    i,
                    lambda i=i, mixed=mixed: self.exchange.start(mixed, i, step, tag_base + i),
                    eager=not mixed.is_cuda,
                    collective=self._collective,
                )
                self._stale.append((i, None, buf))

    def _complete_stale(self, key: int, pending: Pending | None) -> None:
        if pending is None:
            self._thread.wait(key)  # the thread has run exchange.finish
        else:
            self.exchange.finish(pending)

    # -- whole-model operations -------------------------------------------------------
    def drain(self) -> None:
        """Complete any exchange still in flight: an overlapped parameter exchange is
        applied; a staleness-1 exchange is completed without applying it; lagged frames
        are applied (grad mix: the halves still owed, with one optimizer step)."""
        if self.lagged is not None:
            if self.lagged.drain_(self.step_count):
                self.optimizer.step()
            return
        self.wait_parameters()
        for key, pending, _ in self._stale:
            self._complete_stale(key, pending)  # mixed, never applied
        self._stale = []

    def synchronize(self) -> None:
        """Global average of parameters and floating buffers: one consensus model."""
        self.drain()
        if self.lagged is not None:
            self.lagged.average_(self.model)  # the push-sum weights' exact mean
            return
        average_parameters_(self.model, self.comm)

    def consensus_distance(self) -> float:
        """Collective: the exact consensus distance now (one allreduce of the model); it
        also counts in the monitor's ``max_consensus_distance``."""
        self.wait_parameters()
        distance = consensus_distance(self.model, self.comm)
        self.monitor.observe(distance)
        return distance

    def bytes_sent_per_step(self) -> float:
        if not self.communicates:
            return 0.0
        factors = self.factors.bytes_sent() if self.factors else 0.0
        extra = HEADER_BYTES if self.lagged is not None else 0
        return factors + sum(
            self.exchange.bytes_sent(b.nbytes) + extra for b in self.layout.buckets
        )

    @property
    def factor_table(self) -> list[dict[str, Any]] | None:
        """The sufficient-factor decision per Linear layer (None: none, or not yet made:
        it is made at the first step)."""
        return self.factors.table() if self.factors else None

    def close(self) -> None:
        """Complete everything in flight (no message is left unmatched), stop the thread."""
        self.drain()
        if self.lagged is not None:
            self.lagged.close(self.step_count)
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.factors:
            self.factors.close()
        if self._thread is not None:
            self._thread.close()
            self._thread = None

    def state_dict(self) -> dict[str, Any]:
        self.wait_parameters()  # parameters in flight are mixed in before saving
        return super().state_dict()
