"""Sufficient factors in the training step: capture, decision, exchange of Linear layers.

``DistributedOptimizer(..., mix="grad", sufficient_factors="auto")`` (the CLI's
``--sufficient-factors``) takes every eligible ``torch.nn.Linear`` weight out of the
gradient buckets and hands it to a :class:`FactorPath`:

- capture (:mod:`gossipgrad.engine.bucket.factor_capture`): a forward hook keeps the input ``X``
  (``K x N``) and a hook on the output keeps its gradient ``dY`` (``K x M``). A forward with no
  backward leaves no pair; several backward passes before ``step()`` (gradient
  accumulation, or a layer called twice) concatenate along ``K``.
- decision, once, at the first exchange: the ranks agree on each layer's ``K`` (the MAX
  over ranks, one small allreduce), and ``plan.factors.decide`` picks the form per layer;
  rank 0 logs the table (one line per layer) and :meth:`FactorPath.table` returns it.
  Layers decided ``matrix`` are exchanged as matrices at that first step and then handed
  back to the buckets (:meth:`FactorPath.end_step`). Later steps pad fewer rows with
  zeros; more rows than agreed is an error.
- exchange: ``comm.factors.FactorTransport`` on a duplicate of the communicator, in one
  fixed order (reverse registration, i.e. backward order for a sequential model), so
  all-gathers are ordered the same on every rank whatever the buckets do. With overlap a
  layer is posted on the communication thread as soon as its weight gradient is
  accumulated (a layer is posted only after those before it in the fixed order); without,
  at ``step()``.
- rebuild: the mixed gradient lands in ``weight.grad`` before the optimizer steps, so
  weight decay and momentum apply to it as to any gradient. Biases stay in the buckets.

Eligible: an exact ``torch.nn.Linear`` whose weight requires a gradient and belongs to no
other module. A weight also used outside its module's ``forward`` (e.g. read directly by
another module) would be rebuilt without that use: pass ``sufficient_factors="off"``.
"""

# Over 300 lines on purpose: the factor path's decision, binding and exchange share one step-
# state; split, each part would reach into the others.

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from gossipgrad.comm.base import Communicator, ReduceOp, Tag
from gossipgrad.comm.codecs import make_codec
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.factors import FactorPending, FactorTransport
from gossipgrad.comm.schedule import Schedule
from gossipgrad.comm.staging import Stager
from gossipgrad.comm.transport import Pending
from gossipgrad.engine.bucket.factor_capture import FactorLayer, eligible_layers
from gossipgrad.engine.bucket.factor_rules import Form, Pattern, decide
from gossipgrad.engine.bucket.mixer import BucketMixer
from gossipgrad.engine.bucket.rules import Average, make_rule
from gossipgrad.options import ExchangeOptions, SufficientFactors
from gossipgrad.registry import SHAPES, STRATEGIES

log = logging.getLogger(__name__)


def factor_key(index: int) -> int:
    """The communication thread's key of layer ``index`` (bucket keys are >= 0)."""
    return -1 - index


def why_not(opts: ExchangeOptions, size: int) -> str | None:
    """Why these options exchange no factors (None: they can): ``off``, or the strategy's
    rules (:meth:`gossipgrad.specs.StrategySpec.factor_obstacle`)."""
    if opts.sufficient_factors is SufficientFactors.OFF:
        return "they are off"
    return opts.spec.factor_obstacle(opts, size)


class FactorPath:
    """The eligible Linear layers of one model, exchanged as factors or matrices.

    Args:
        layers: from :func:`eligible_layers`.
        comm: the training communicator; this object uses a duplicate (collective).
        opts: the exchange options (strategy, ``sufficient_factors``).
        schedule: gossip's schedule (the one the buckets use).
        stager: how device tensors reach MPI.
        keep_matrices: keep the layers decided ``matrix`` after the first step (ps: its
            buckets are fixed at construction) instead of handing them back to the buckets.

    Call :meth:`bind` once the communication thread exists (or with None: blocking), then
    per step: :meth:`post_all` and :meth:`wait_all` around the bucket exchange, and
    :meth:`end_step` after the optimizer step. Invariant: the layers are posted in
    ``order`` on every rank. ``weight_ids`` are the weights this object sends (all eligible
    ones until the first step ends, then those decided ``factors``).
    """

    def __init__(
        self,
        layers: list[tuple[str, torch.nn.Linear]],
        comm: Communicator,
        opts: ExchangeOptions,
        schedule: Schedule,
        stager: Stager | None,
        keep_matrices: bool = False,
    ) -> None:
        self.mode = opts.sufficient_factors
        self.keep_matrices = keep_matrices
        self.comm = comm.dup()
        self.strategy = opts.strategy
        self.pattern = Pattern(opts.spec.factor_pattern)
        self.rule: Average = make_rule(opts.rule)
        self.transport = FactorTransport(
            self.comm, self.pattern is Pattern.PEER, schedule, stager, make_codec(opts.wire)
        )
        # a layer decided "matrix" goes as a bucket (updated on every rank like the others)
        shape = SHAPES.get(self.pattern.matrix_shape)
        self.matrix = BucketMixer(
            shape.transport(self.comm, schedule, stager, "auto"),
            make_codec(opts.wire, opts.feedback),
            self.rule,
        )
        self.all_layers = [FactorLayer(i, name, m) for i, (name, m) in enumerate(layers)]
        self._use(self.all_layers)
        self._next = 0
        self._settled = False
        self._thread: Any = None
        self._step: Callable[[], int] = lambda: 0
        self._holding: Callable[[], bool] = lambda: False
        for layer in self.layers:
            layer.hooks.append(layer.module.register_forward_hook(layer.capture, with_kwargs=True))
            layer.grad()  # a tensor of its own from the start: zeroed in place, never None

    def _use(self, layers: list[FactorLayer]) -> None:
        self.layers = layers
        self.order = list(reversed(layers))  # backward order of a sequential model
        self.weight_ids = frozenset(id(layer.weight) for layer in layers)

    @property
    def codec_states(self) -> dict[str, Any]:
        """This rank's stateful codecs of the factor path, by name, for checkpoints (the
        matrices' error-feedback residuals; factor blocks keep none)."""
        codec = self.matrix.codec
        return {"codec_factor_matrices": codec} if not codec.lossless else {}

    def bind(
        self, thread: Any, step: Callable[[], int], holding: Callable[[], bool] = lambda: False
    ) -> None:
        """Post through ``thread`` (a ``CommThread``; None: blocking at ``step()``), as soon
        as each weight gradient is accumulated; ``step()`` gives the current step, and
        while ``holding()`` (``no_sync``) backward passes post nothing."""
        self._thread, self._step, self._holding = thread, step, holding
        if thread is not None:
            for layer in self.layers:
                layer.hooks.append(
                    layer.weight.register_post_accumulate_grad_hook(
                        lambda _p, layer=layer: self._ready(layer)
                    )
                )

    # -- per step --------------------------------------------------------------------
    def zero_grad_(self) -> None:
        """Zero the weights' gradients in place (captures are kept: a forward may have run
        before ``zero_grad``)."""
        for layer in self.layers:
            layer.grad().zero_()

    def _ready(self, layer: FactorLayer) -> None:
        if layer.posted:
            raise RuntimeError(
                f"rank {self.comm.rank}, step {self._step()}: layer {layer.name!r} got a "
                "second backward pass after its gradient was sent (gradient accumulation?); "
                "run the first passes inside `with opt.no_sync():`, or accumulate with "
                "overlap=False (--no-overlap)"
            )
        if self._holding():
            return
        layer.ready = True
        while self._next < len(self.order) and self.order[self._next].ready:
            self._post(self.order[self._next])

    def post_all(self) -> None:
        """Post every layer not yet posted this step, in order."""
        while self._next < len(self.order):
            self._post(self.order[self._next])

    def _post(self, layer: FactorLayer) -> None:
        if layer.decision is None:
            self._decide()
        self._next += 1
        layer.posted = True
        step, grad, d = self._step(), layer.grad(), layer.decision
        if d.form == Form.FACTORS:
            dys, xs = layer.factors()
            rows = sum(int(x.shape[0]) for x in xs)
            if rows > d.rows:
                raise RuntimeError(
                    f"rank {self.comm.rank}, step {step}: layer {layer.name!r} has {rows} rows "
                    f"of sufficient factors, more than the {d.rows} agreed at the first step "
                    "(batch x positions x backward passes must not grow); pass "
                    "--sufficient-factors off"
                )

            def start() -> Pending:
                return self.transport.start(grad, dys, xs, d.rows, layer.index, step)
        else:

            def start() -> Pending:
                inner = self.matrix.start(
                    grad.view(-1), layer.index, step, Tag.FACTOR + layer.index
                )
                return FactorPending(grad, list(inner.requests), inner=inner)

        layer.pairs = []  # X and dY are packed (or not needed): let them go
        if self._thread is None:
            layer.pending = start()
        else:
            self._thread.submit(
                factor_key(layer.index),
                start,
                eager=not grad.is_cuda,
                collective=self.pattern is Pattern.ALLGATHER,
            )

    def wait_all(self) -> None:
        """Wait for every layer's exchange; the mixed gradients are then in ``weight.grad``."""
        for layer in self.order:
            if self._thread is None:
                self.finish(layer.pending)
                layer.pending = None
            else:
                self._thread.wait(factor_key(layer.index))

    def finish(self, pending: FactorPending) -> None:
        """Wait for one layer's exchange and leave the mixed gradient in ``pending.buf``."""
        if pending.inner is not None:
            self.matrix.finish(pending.inner)
        else:
            finish_factors(self.transport, self.rule, pending)

    def end_step(self) -> bool:
        """Forget this step's captures and postings. After the first step, stop handling the
        layers decided ``matrix`` and return True (once): the caller buckets them again."""
        self._next = 0
        for layer in self.layers:
            layer.pairs, layer.posted, layer.ready = [], False, False
        if self._settled:
            return False
        self._settled = True
        keep = [
            layer
            for layer in self.layers
            if self.keep_matrices or layer.decision.form == Form.FACTORS
        ]
        if len(keep) == len(self.layers):
            return False
        for layer in self.layers:
            if layer not in keep:
                layer.unhook()
        self._use(keep)
        return True

    # -- the decision ----------------------------------------------------------------
    def _decide(self) -> None:
        """Agree on each layer's rows (MAX over ranks) and decide its form; rank 0 logs it."""
        assert self.layers is self.all_layers, "decided once, before any layer is released"
        rows = np.array([layer.rows_captured() for layer in self.layers], dtype=np.int64)
        allreduce_(self.comm, rows, ReduceOp.MAX)
        for layer, k in zip(self.layers, rows.tolist(), strict=True):
            w = layer.weight
            layer.decision = decide(
                self.mode,
                self.strategy,
                self.comm.size,
                int(k),
                w.shape[0],
                w.shape[1],
                w.element_size(),
            )
        if self.comm.rank == 0:
            # INFO for a caller who asked for factors; auto's per-layer choice is DEBUG (-v)
            level = logging.INFO if self.mode is SufficientFactors.ON else logging.DEBUG
            for line in self.describe():
                log.log(level, "%s", line)

    def describe(self) -> list[str]:
        """The decision table as text, one line per layer (rank 0 logs it)."""
        head = (
            f"sufficient factors ({self.mode.value}, {self.strategy}, "
            f"{self.comm.size} ranks): {len(self.layers)} Linear layer(s)"
        )
        lines = [head]
        for layer in self.all_layers:
            d = layer.decision
            if d is None:
                continue
            lines.append(
                f"  {layer.name}: K={d.rows} M={d.out_features} N={d.in_features} "
                f"matrix {_size(d.matrix_bytes)}, factors {_size(d.factor_bytes)} "
                f"per step -> {d.form}"
            )
        return lines

    def table(self) -> list[dict[str, Any]] | None:
        """One record per layer (name, K, M, N, bytes of both forms, form); None before the
        first exchange."""
        if any(layer.decision is None for layer in self.all_layers):
            return None
        return [{"layer": layer.name, **layer.decision.to_json()} for layer in self.all_layers]

    def bytes_sent(self) -> float:
        """Bytes a rank sends per step for the layers it handles (all of them as matrices
        before the decision; after the first step only those sent as factors); to one peer,
        the mean over a period of the schedule."""
        total = 0.0
        for layer in self.layers:
            d = layer.decision or decide(
                SufficientFactors.OFF,
                self.strategy,
                self.comm.size,
                0,
                *layer.weight.shape,
                layer.weight.element_size(),
            )
            raw = d.factor_bytes if d.form == Form.FACTORS else d.matrix_bytes
            total += raw * self.transport.codec.wire_ratio(layer.weight.element_size())
        if self.pattern is Pattern.PEER:  # base2: some ranks idle at some steps
            total *= self.transport.schedule.active_share
        return total

    def close(self) -> None:
        for layer in self.all_layers:
            layer.unhook()


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e6:.2f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.2f} kB"


def finish_factors(transport: FactorTransport, rule: Average, pending: FactorPending) -> None:
    """Wait for one layer's factors and rebuild its mixed gradient in ``pending.buf``: the
    peer's product mixed in by the rule, or the mean over ranks of every rank's (the own
    autograd gradient replaced: the ranks stay bit-identical)."""
    transport.wait(pending)
    received = transport.unpack(pending)
    if received is None:
        return
    dy, x = received
    if transport.one_peer:
        rule.mix_product_(pending.buf, dy, x, pending.weight, transport.unpack_sent(pending))
    else:
        rule.mean_product_(pending.buf, dy, x, transport.comm.size)


def exchange_factors_(
    comm: Communicator,
    strategy: str,
    grad: torch.Tensor,
    dys: list[torch.Tensor],
    xs: list[torch.Tensor],
    rows: int,
    index: int,
    step: int,
    schedule: Schedule | None = None,
) -> None:
    """One layer's factors, exchanged by ``strategy``'s pattern and mixed into ``grad``
    (this rank's own gradient on entry), blocking: for checks and benchmarks."""
    one_peer = Pattern(STRATEGIES.get(strategy).factor_pattern) is Pattern.PEER
    transport = FactorTransport(comm, one_peer, schedule)
    finish_factors(transport, Average(), transport.start(grad, dys, xs, rows, index, step))


class Router:
    """What the communication thread finishes with: a layer's factors by the factor path,
    everything else by ``buckets`` (anything with ``comm`` and ``finish(pending)``)."""

    def __init__(self, buckets: Any, factors: FactorPath) -> None:
        self.comm, self.buckets, self.factors = buckets.comm, buckets, factors

    def finish(self, pending: Pending) -> None:
        if isinstance(pending, FactorPending):
            self.factors.finish(pending)
        else:
            self.buckets.finish(pending)


def make_factor_path(
    model: torch.nn.Module,
    comm: Communicator,
    opts: ExchangeOptions,
    schedule: Schedule,
    stager: Stager | None,
    keep_matrices: bool = False,
) -> FactorPath | None:
    """The factor path of ``model`` under ``opts``, or None (no eligible layer, or options
    that exchange no factors; rank 0 logs why once when ``auto`` found layers)."""
    if opts.sufficient_factors is SufficientFactors.OFF:
        return None
    layers = eligible_layers(model)
    reason = why_not(opts, comm.size) if layers else "no eligible Linear layer"
    if reason is not None:
        if comm.rank == 0 and (layers or opts.sufficient_factors is SufficientFactors.ON):
            # INFO only for a caller who asked for them: auto's choice is no news to one
            # who never set the option (the CLI's resolved configuration shows it anyway)
            asked = opts.sufficient_factors is SufficientFactors.ON
            log.log(
                logging.INFO if asked else logging.DEBUG,
                "sufficient factors: not used (%s)",
                reason,
            )
        return None
    return FactorPath(layers, comm, opts, schedule, stager, keep_matrices)
