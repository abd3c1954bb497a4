"""The bucket optimizer's shell: buckets, hooks and the order of a step, for every strategy
whose exchange is one bucket at a time (gossip, allreduce, allreduce-param, local, and any
plugin built the same way). What varies is handed in: the transport (who the bytes go to),
the wire codec, the mixing rule and the timing (:mod:`gossipgrad.engine.bucket.timing`).

Users reach it through ``gossipgrad.DistributedOptimizer`` (:mod:`gossipgrad.strategies.face`).

A step: ``zero_grad`` zeroes the gradient buckets (``p.grad`` are views into them); with
``mix="grad"`` ``step()`` exchanges the gradient buckets (posted from backward hooks as
they fill, when the timing overlaps), then the wrapped optimizer steps; with
``mix="param"`` the optimizer steps, then the parameter buckets (``p.data`` are views too)
are exchanged (waited for by forward pre-hooks of the modules that use them, when the
timing overlaps). Parameters must therefore be read through their own module's
``forward``; otherwise pass ``overlap=False``. Overlapped and blocking exchange give
bit-identical results. Every ``sync_every`` steps, and when the consensus monitor asks
(``sync="adaptive"``), a global average makes one model.

Ranks stay in step, or say why not: gradient accumulation posts a bucket after
``backward_passes_per_step`` passes (or not inside :meth:`BucketOptimizer.no_sync`), and a
pass after it left is an error (:mod:`.accumulate`); the first step checks that the ranks
start alike (:mod:`.startcheck`); a ``GradScaler`` skips the same steps on every rank
(:mod:`.amp`); :meth:`~BucketOptimizer.join` and ``close()`` let ranks end after
different numbers of steps (:mod:`.join`).
"""

# Over 300 lines on purpose: the one class that holds a bucketed step's protocol (hooks,
# order, factors, monitor, membership changes, joins); timing, rule, transport, the
# accumulation counter, the start check, AMP and the join agreement live apart.

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from typing import Any

import torch

from gossipgrad.comm.base import Communicator, Tag
from gossipgrad.comm.codecs import Codec, make_codec
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.engine.bucket import amp
from gossipgrad.engine.bucket.accumulate import (
    AccumulationError,
    ReadyCounter,
    accumulation_message,
)
from gossipgrad.engine.bucket.early import EarlySteps, Mode
from gossipgrad.engine.bucket.factors import Router, make_factor_path
from gossipgrad.engine.bucket.join import JoinAgreement, join_period
from gossipgrad.engine.bucket.mixer import BucketMixer, shape_mixers
from gossipgrad.engine.bucket.monitor import ConsensusMonitor
from gossipgrad.engine.bucket.rules import make_rule
from gossipgrad.engine.bucket.startcheck import StartCheck
from gossipgrad.engine.bucket.timing import Timing, TimingContext
from gossipgrad.engine.buckets import BucketLayout, install_forward_waits
from gossipgrad.engine.commthread import CommThread
from gossipgrad.engine.consensus import broadcast_parameters_, consensus_distance, verify_identical
from gossipgrad.engine.protocol import WrappedOptimizer
from gossipgrad.options import ExchangeOptions, Mix

log = logging.getLogger(__name__)


class BucketOptimizer(WrappedOptimizer):
    """Wraps ``optimizer``; ``step()`` = exchange + local step, in the order of ``mix``.

    Args:
        optimizer: a ``torch.optim`` optimizer over ``model``'s parameters.
        model: the module being trained (its parameters are broadcast from rank 0 and
            verified identical on construction; gradients, and values with
            ``mix="param"``, become views into flat buckets).
        comm: the communicator.
        options: the exchange (validated for its strategy).
        shape: how a bucket's wire moves, the strategy's exchange shape
            (:class:`gossipgrad.specs.ShapeSpec`).
        stager: how device tensors reach MPI (default: direct on CPU).
        mixers: builds the bucket mixer, ``(comm, schedule, stager, topology, codec,
            rule)``, for the first communicator and again after a shrink; the strategy's
            spec gives it (default: :func:`gossipgrad.engine.bucket.mixer.shape_mixers` of
            ``shape``).
    """

    _step_supports_amp_scaling = True  # GradScaler.step calls step() on every rank (amp.py)

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator,
        options: ExchangeOptions,
        *,
        shape: Any,
        stager: Stager | None = None,
        mixers: Callable[..., BucketMixer] | None = None,
    ) -> None:
        super().__init__(optimizer, model, comm, options)
        opts = self.options  # bound: the mix's default rule applied
        self.mix, self.shape = opts.mix, shape
        broadcast_parameters_(model, comm)
        verify_identical(model, comm)
        self._stager = stager
        self._mixers = mixers or shape_mixers(shape)
        self._start = StartCheck()
        self._early = EarlySteps(self.optimizer, comm.rank)  # timing="early" (param mix)
        self._amp = False  # a GradScaler drives the steps (every rank agrees each skip)
        self._exchanged = False  # this step's gradient exchange is complete
        self._posted = False  # a backward hook posted a gradient bucket this step
        self._end_queued = False  # the end-of-backward callback is queued
        self._closed = self._abandoned = False
        self.rule = make_rule(opts.rule, opts)
        self.codec: Codec = make_codec(opts.wire, opts.feedback)
        self._total: int | None = None  # the run's steps, where a timing's window needs them
        schedule = Schedule(comm.size, opts.rank_topology, opts.seed, opts.rotate)
        # Linear weights that may go as sufficient factors (engine/bucket/factors.py) get no bucket.
        self.factors = make_factor_path(model, comm, opts, schedule, stager)
        if not self.codec.lossless:  # residuals differ per rank: saved per rank
            self.rank_states = {"codec": self.codec}
        if self.factors:
            self.rank_states.update(self.factors.codec_states)
        if self.rule.stateful:  # the outer momentum: this rank's
            self.rank_states = {**self.rank_states, "outer": self.rule}
        self._bind_layout(self.factors.weight_ids if self.factors else frozenset())
        self._hooks: list[Any] = []
        self._connect(comm)
        self.monitor = ConsensusMonitor(model, comm, opts, self._average, self.timing.wait_)
        if self._grad_hooks:
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._grad_ready)
                for p in model.parameters()
                if p.requires_grad
            ]
        if self.timing.forward_waits:
            self._hooks += self._forward_waits()

    @property
    def _grad_hooks(self) -> bool:
        """Backward hooks count the gradient buckets: to post each as it fills, to
        complete the gradient exchange at the end of backward, or to update a parameter
        bucket from backward (``timing="early"``)."""
        early = self.timing.steps_in_backward and self._early.mode is not Mode.OFF
        return self.timing.ready_hooks or self._ends_in_backward or early

    @property
    def _ends_in_backward(self) -> bool:
        return self.mix is Mix.GRAD and self.timing.completes_in_backward

    def _forward_waits(self) -> list[Any]:
        """Forward pre-hooks that wait for the parameter buckets a module reads."""
        return install_forward_waits(self.model, self._bucket_of, self.timing.wait_)

    def _bind_layout(self, exclude: frozenset[int]) -> None:
        """Bucket every trainable parameter not in ``exclude``. Built again, once, after
        the first step when sufficient factors hand back the layers they send as matrices."""
        self.layout = BucketLayout(
            list(self.model.parameters()), self.options.bucket_cap_bytes, exclude
        )
        self.layout.bind_grads_()
        if self.mix is Mix.PARAM:
            self.layout.bind_params_()
        self._bucket_of = {id(p): b.index for b in self.layout.buckets for p in b.params}
        self._counter = ReadyCounter(
            [len(b.params) for b in self.layout.buckets], self.options.backward_passes_per_step
        )

    def _connect(self, comm: Communicator) -> None:
        """Everything that depends on the ranks: schedule, transport, thread, timing."""
        opts = self.options
        self.comm = comm
        self.schedule = Schedule(comm.size, opts.rank_topology, opts.seed, opts.rotate)
        self.communicates = comm.size > 1 and self.shape.moves
        self.mixer = self._mixers(
            comm, self.schedule, self._stager, opts.topology, self.codec, self.rule
        )
        collective = self.shape.collective  # posted in order, by the caller
        thread = None
        timing = self.timing_spec = opts.timing_spec
        if opts.overlap and self.communicates and not timing.polls_itself:
            # A window only where a forward waits for buckets in order (the order is fixed).
            window = timing.forward_window if self.mix is Mix.PARAM else None
            finisher = Router(self.mixer, self.factors) if self.factors else self.mixer
            block = comm.policy.block and not collective  # a collective posts under the lock
            thread = CommThread(finisher, comm.timeout, window, block=block)
        self.overlap = thread is not None  # the exchange runs on the communication thread
        ctx = TimingContext(
            opts, comm, self.schedule, self.layout, self.mixer, thread, collective, self.rule
        )
        self.timing: Timing = timing.build(ctx) if self.communicates else _NoExchange()
        if self._total is not None:
            self.timing.plan_(self._total)
        self.wire_codecs = (self.codec, *self.timing.codecs)
        if self.factors:
            self.factors.bind(thread, lambda: self.step_count, lambda: self._counter.is_holding)
        period = timing.agreement_period(opts.timing_args)
        self._join = JoinAgreement(comm, join_period(period))

    @property
    def exchange_topology(self) -> str:
        """Where the transport keeps a schedule of its own (gossip-node's, over nodes),
        that one's topology; else the ranks'."""
        return (self.mixer.schedule or self.schedule).topology

    @property
    def bucket_count(self) -> int:  # type: ignore[override]
        return len(self.layout.buckets)

    # -- membership changes (engine/run/membership.py) -----------------------------------
    @property
    def can_shrink(self) -> bool:
        return self.factors is None and self.timing_spec.follows_shrink

    def abandon(self) -> None:
        """After a rank died: forget every exchange in flight (their communicator is
        revoked; nothing of them is applied). Parameters keep their values, each bucket
        either mixed or its own; call :meth:`rejoin_` next."""
        self.timing.abandon()
        self._join.abandon()
        self._exchanged = self._posted = False  # the failed step's: param_groups mixes none
        self._abandoned = True  # close() now only stops this rank's threads

    def rejoin_(self, comm: Communicator, step: int) -> None:
        """Continue on ``comm`` (the survivors) at ``step`` (agreed by every rank): a
        schedule for its size, a new transport, thread and timing, and a new join
        agreement (collective over ``comm``: it duplicates it); the caller follows with a
        global average."""
        if not self.can_shrink:
            raise RuntimeError("a membership change needs --sufficient-factors off and --max-lag 0")
        self.step_count = step
        self._connect(comm)
        self._abandoned = False
        self.monitor.comm = comm
        if not (self._grad_hooks or self.timing.forward_waits):  # one rank left
            for h in self._hooks:
                h.remove()
            self._hooks = []

    # -- the step --------------------------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The wrapped optimizer's groups. Read between backward and ``step()`` (as
        ``GradScaler.unscale_`` and gradient clipping over the groups do), it first
        completes this step's gradient exchange, so what is read is the mixed gradient."""
        if getattr(self, "_posted", False) and not self._exchanged:
            self.synchronize_gradients()
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the gradient buckets (gradients stay views into them; ``set_to_none`` is
        accepted for compatibility and ignored)."""
        for b in self.layout.buckets:
            b.grads.zero_()
        if self.factors:
            self.factors.zero_grad_()
        self._counter.reset()
        self._exchanged = self._posted = self._end_queued = False
        self.timing.reset_step()

    def no_sync(self) -> contextlib.AbstractContextManager[None]:
        """Inside, backward passes accumulate gradients and post nothing; the first
        backward after it posts every bucket (DDP's ``no_sync``)::

            with opt.no_sync():
                model(x1).sum().backward()
            model(x2).sum().backward()
            opt.step()
        """
        return self._counter.holding()

    def synchronize_gradients(self) -> None:
        """Complete this step's gradient exchange now (``mix="grad"``); the gradients
        then hold the mix, and ``step()`` only updates. What Horovod's ``synchronize()``
        does (``gossipgrad.torch``). A no-op with ``mix="param"``."""
        if self.mix is not Mix.GRAD or self._exchanged:
            return
        t = self.step_count
        grads = [b.grads for b in self.layout.buckets]
        if self._start.pending:  # hashed before the exchange mixes them
            for i, g in enumerate(grads):
                self._start.note(i, g)
        if self.factors:
            self.factors.post_all()  # those no backward hook has posted
        self.timing.exchange_(grads, Tag.GRAD_BUCKET, t)
        if self.factors:
            self.factors.wait_all()
        self._exchanged = True

    def step(self, closure: Any = None, grad_scaler: Any = None) -> Any:
        """Mix and take the optimizer step; returns the closure's loss if given.

        ``grad_scaler``: handed over by ``torch.amp.GradScaler.step`` (never pass it
        yourself); every rank then skips the update when any rank's gradients hold
        inf/NaN (:mod:`gossipgrad.engine.bucket.amp`)."""
        if self.communicates and not self.layout.grads_bound():
            raise RuntimeError(
                "gradients were detached from their buckets (was "
                "zero_grad(set_to_none=True) called on the inner optimizer?); "
                "call zero_grad() on the DistributedOptimizer instead"
            )
        t = self.step_count
        grads = [b.grads for b in self.layout.buckets]
        if self.mix is Mix.PARAM:  # what backward's per-bucket updates could not see
            self._early.before_step(t, closure, grad_scaler, grads)
        self.timing.before_update(t)
        self.synchronize_gradients()
        self._start.run(self.comm, self._params(), self.optimizer, t, grads)
        skip = grad_scaler is not None and self._agree_skip(grad_scaler, t)
        loss = None if skip else self._update(closure)
        self._after_update(t)
        return loss

    def _update(self, closure: Any) -> Any:
        """The optimizer's step over what backward did not update already."""
        done = self._early.updated
        if not done:
            return self.optimizer.step(closure)
        updated = {id(p) for b in done for p in self.layout.buckets[b].params}
        rest = [p for g in self.optimizer.param_groups for p in g["params"] if id(p) not in updated]
        if rest:
            self._early.update_(rest)
        return None

    def _params(self) -> list[torch.Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _agree_skip(self, scaler: Any, step: int) -> bool:
        why = self.timing_spec.amp_refusal(self.options.timing_args, self.mix.value)
        if why is not None:
            raise RuntimeError(
                f"a GradScaler cannot drive timing={self.options.timing!r} with "
                f"mix={self.mix.value!r}: {why}"
            )
        self._amp = True
        return amp.agree_skip(self.comm, scaler, self, step)

    def _after_update(self, t: int) -> None:
        if self.mix is Mix.GRAD:
            if self.factors and self.factors.end_step():  # first step: matrices to buckets
                self._bind_layout(self.factors.weight_ids)
                self.codec.forget()  # residuals of the old buckets (one step's remainder)
        else:
            self.timing.exchange_([b.values for b in self.layout.buckets], Tag.PARAM_BUCKET, t)
        self._advance()

    def _zero_step(self) -> None:
        """A step with no gradient of this rank's and no update: what a joined rank takes
        so that its peers' exchanges (and collectives) still match."""
        self.zero_grad()
        t = self.step_count
        self._start.run(self.comm, self._params(), self.optimizer, t, None)
        if self._amp:
            amp.agree(self.comm, False, t)
        if self.timing_spec.catches_up:
            self.timing.skip_(t, self.optimizer)
            self._advance()
            return
        # Sent without error feedback (none added, none kept): ranks that hold one model,
        # as after synchronize(), still hold it after a joined rank's steps.
        feedback = self.codec.feedback
        self.codec.set_feedback(False)
        try:
            self.timing.before_update(t)
            self.synchronize_gradients()
            self._after_update(t)
        finally:
            self.codec.set_feedback(feedback)

    def _advance(self) -> None:
        self.step_count += 1
        self._exchanged = self._posted = False
        self._early.after_step()
        if self.mix is Mix.PARAM:  # the next backward may update buckets again
            self._counter.reset()
        every = self.options.sync_every
        if every and self.step_count % every == 0:
            self._average()
        else:  # every --monitor-every steps: estimate, and average if it is too far
            self.monitor.after_step(self.step_count)
        self._join.after_step(self.step_count)

    def behind(self) -> bool:
        """True when a peer is far enough ahead that this rank should skip this step's
        forward and backward and call :meth:`skip_step` (``max_lag >= 1`` only)."""
        return self.timing.behind(self.step_count)

    def skip_step(self) -> None:
        """This step's exchange without a gradient of this rank's (after :meth:`behind`)."""
        self.zero_grad()
        self.timing.skip_(self.step_count, self.optimizer)
        self._advance()

    def _grad_ready(self, p: torch.Tensor) -> None:
        b = self._bucket_of.get(id(p))
        if b is None:  # a weight sent as sufficient factors
            return
        if self.mix is Mix.PARAM:
            self._queue_end()  # the end of backward is what step() compares with
            if not (self._early.on and not self._start.pending):
                return  # lockstep's order this step: nothing to count
        try:
            if self._exchanged:
                raise AccumulationError(str(b))
            complete = self._counter.ready(b)
        except AccumulationError:
            raise AccumulationError(
                accumulation_message(
                    self.comm.rank, self.step_count, b, self.options.backward_passes_per_step
                )
            ) from None
        if complete and self.mix is Mix.PARAM:
            self._update_early(b)
        elif complete:
            grads = self.layout.buckets[b].grads
            self._start.note(b, grads)
            self._posted = True
            if self.timing.ready_hooks:
                self.timing.ready(b, grads, Tag.GRAD_BUCKET, self.step_count)
            if self._ends_in_backward:
                self._queue_end()

    def _update_early(self, b: int) -> None:
        """``timing="early"``: bucket ``b``'s gradient is complete; update its parameters
        now and post their values to this step's peer (the next forward waits for them)."""
        bucket = self.layout.buckets[b]
        self.timing.wait_([b])  # its last mix, where no forward waited for it
        self._early.update_(bucket.params)
        self._early.updated.add(b)
        self.timing.ready(b, bucket.values, Tag.PARAM_BUCKET, self.step_count)

    def _queue_end(self) -> None:
        if not self._end_queued:
            self._end_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_ended)

    def _backward_ended(self) -> None:
        """Autograd's end of a backward pass that completed a gradient bucket: when every
        bucket is complete, complete the exchange now, as DDP's backward does, so that
        clipping, a norm or a GradScaler's unscale between ``backward()`` and ``step()``
        reads the mixed gradients. A bucket still open (a parameter that got no gradient
        yet, gradients accumulated over more passes) leaves it to the next pass or to
        ``step()``."""
        self._end_queued = False
        if self.mix is Mix.PARAM:
            self._early.sealed([b.grads for b in self.layout.buckets])
        elif self._counter.all_posted and not self._exchanged:
            self.synchronize_gradients()

    # -- uneven ends -----------------------------------------------------------------
    def join(self) -> int:
        """Collective in effect: this rank has no more data. It takes zero-steps (exchanges
        without a gradient or an update of its own) until every rank has called
        :meth:`join`, and returns the rank that joined last (as Horovod's ``join``).
        Between this call and its return the other ranks may only take steps; afterwards
        every rank is at the same step and may train on (:mod:`gossipgrad.engine.bucket.join`)."""
        last = self._end(by_close=False)
        self._join.reset()
        return last

    def _end(self, by_close: bool) -> int:
        self._join.join(self.step_count, by_close)
        while not self._join.done:
            self._zero_step()
        return self._join.last_rank

    @property
    def parameters_in_flight(self) -> int:
        """Parameter buckets posted after the last step and not yet mixed in."""
        return self.timing.in_flight

    def wait_parameters(self, buckets: list[int] | None = None) -> None:
        """Wait until the parameter exchange of ``buckets`` (default: all in flight) has
        been mixed into the parameters (a no-op unless ``mix="param"`` is overlapped)."""
        self.timing.wait_(buckets)

    # -- whole-model operations -------------------------------------------------------
    def drain(self) -> None:
        """Complete any exchange still in flight: an overlapped parameter exchange is
        applied; a staleness-1 exchange is completed without applying it; lagged frames
        are applied (grad mix: the shares still owed, with one optimizer step)."""
        if self.timing.drain_(self.step_count):
            self.optimizer.step()

    def settle(self) -> None:
        """As :meth:`drain`, except that a staleness-1 exchange is kept and applied at the
        next step, as without the call."""
        if self.timing.settle_(self.step_count):
            self.optimizer.step()

    def synchronize(self) -> None:
        """Global average of parameters and floating buffers: one consensus model
        (collective). Not Horovod's ``synchronize()``, which only waits for the gradients:
        that is :meth:`synchronize_gradients` (and ``gossipgrad.torch``'s optimizer)."""
        self._average()

    def _average(self) -> None:
        self.drain()
        self.timing.average_(self.model, self.comm)

    def consensus_distance(self) -> float:
        """Collective: the exact consensus distance now (one allreduce of the model); it
        also counts in the monitor's ``max_consensus_distance``."""
        self.timing.wait_()
        distance = consensus_distance(self.model, self.comm)
        self.monitor.observe(distance)
        return distance

    def plan_steps(self, total: int) -> None:
        """The run is ``total`` steps long (a dense window of ``--timing local:H`` needs it;
        ``gossipgrad train`` calls this before the first step)."""
        self._total = total
        self.timing.plan_(total)

    def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
        super().load_state_dict(state)
        self.timing.rebase_()  # the parameters were loaded before (checkpoint.restore_)

    def exchange_stats(self, start: int, end: int) -> dict[str, Any]:
        """Steps ``start`` to ``end``: the exchanges (``outer_steps``, ``dense_steps`` where
        the timing does not exchange every step) and the bytes this rank sent in them."""
        counts = self.timing.exchange_counts(start, end)
        if counts is None:
            return {"exchange_bytes": self.bytes_sent_per_step() * (end - start)}
        per = self.bytes_per_exchange()
        return {**counts, "exchange_bytes": per * sum(counts.values())}

    def bytes_sent_per_step(self) -> float:
        """Bytes a rank sends per step: every bucket's wire bytes moved by the strategy's
        shape, each message's header, and the factor path's; for one peer a step, the
        mean over a period of the schedule (base2 leaves some ranks idle at some steps);
        with local steps, one exchange's bytes over H."""
        return self.bytes_per_exchange() * self.timing_spec.send_share(self.options.timing_args)

    def bytes_per_exchange(self) -> float:
        """Bytes a rank sends in one step that exchanges (:meth:`bytes_sent_per_step`
        before the timing's share of steps that send)."""
        if not self.communicates:
            return 0.0
        factors = self.factors.bytes_sent() if self.factors else 0.0
        spec = self.options.spec
        own = [
            self.mixer.bucket_bytes(b.nbytes, self.codec.wire_nbytes(b.grads))
            for b in self.layout.buckets
        ]
        if own and None not in own:  # the mix counts its own (gossip-node's, within a node too)
            return factors + sum(own)
        buckets = sum(
            spec.bytes_per_step(
                self.codec.wire_nbytes(b.grads) + self.timing.header_bytes, self.comm.size
            )
            for b in self.layout.buckets
        )
        if self.shape.one_peer and not self.timing_spec.sends_idle:  # idle steps send none
            buckets *= self.schedule.active_share
        return factors + buckets

    def lag_stats(self) -> dict[str, Any]:
        return self.timing.stats()

    @property
    def factor_table(self) -> list[dict[str, Any]] | None:
        return self.factors.table() if self.factors else None

    def close(self) -> None:
        """Complete everything in flight (no message is left unmatched), stop the thread.

        Collective in effect: a rank that closes while others still train serves their
        exchanges until every rank has closed (as :meth:`join`), and then every rank
        raises RuntimeError naming the rank that stopped first and its step (call
        :meth:`join` after the loop where ranks may run different numbers of steps).
        Called while an exception is propagating, or after :meth:`abandon`, it only stops
        this rank's threads."""
        if self._closed:
            return
        self._closed = True
        failing = sys.exc_info()[1] is not None or self._abandoned
        if failing:
            self._join.abandon()
        elif not self._join.done:
            self._end(by_close=True)
        uneven = None if failing else self._join.uneven_message()
        if failing and self.timing_spec.follows_shrink:
            self.timing.abandon()  # peers that failed too will never complete what is in flight
        else:
            self.drain()
        self.timing.close(self.step_count)
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.factors:
            self.factors.close()
        if uneven is not None:
            raise RuntimeError(uneven)

    def state_dict(self) -> dict[str, Any]:
        self.timing.wait_()  # parameters in flight are mixed in before saving
        return super().state_dict()


class _NoExchange(Timing):
    """One rank, or a strategy that sends nothing: every exchange is a no-op."""

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        return None
