"""The timing interface: what the gossip optimizer's shell asks of the exchange's timing.

The shell (:mod:`gossipgrad.engine.bucket.shell`) owns the buckets, the hooks and the order of a
step (``mix="grad"``: exchange the gradient buckets, then the optimizer steps;
``mix="param"``: the optimizer steps, then the parameter buckets are exchanged). A timing
decides when what it posted is mixed in. Every method has the default of a timing that
lacks the feature, so an implementation overrides only what it does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.engine.consensus import average_parameters_


@dataclass(frozen=True)
class TimingContext:
    """What a timing spec builds its runtime timing from (the shell hands it over for each
    communicator: at the start and after a membership change).

    Attributes:
        opts: the exchange options (``opts.timing_args``: the parsed ``NAME:ARG``).
        comm: the communicator.
        schedule: the partner schedule over ranks.
        layout: the buckets (``values`` with the parameter mix, ``grads`` always).
        mixer: one bucket's exchange (transport, codec, rule).
        thread: the communication thread, or None (blocking, or a timing that polls itself).
        collective: the exchange is a collective, posted in order by the caller.
        rule: the mixing rule.
    """

    opts: Any
    comm: Communicator
    schedule: Any
    layout: Any
    mixer: Any
    thread: Any
    collective: bool
    rule: Any

    @property
    def args(self) -> tuple[int, ...]:
        return self.opts.timing_args

    @property
    def mix_params(self) -> bool:
        return self.opts.mix == "param"


class Timing:
    """Base of the timings (see the package docstring).

    Attributes:
        ready_hooks: wants :meth:`ready` from backward hooks as each gradient bucket fills.
        forward_waits: parameter buckets are in flight after ``step()`` and must be waited
            for (:meth:`wait_`) before forward first reads them.
        completes_in_backward: with the gradient mix, the exchange of a step is complete
            once every bucket is posted, so the shell completes it at the end of backward
            (autograd's end-of-backward callback, as DDP's reduction): what a user reads
            between ``backward()`` and ``step()`` (a norm, a clip, a GradScaler's unscale)
            is the mixed gradient. False (a late timing: stale, lagged): the exchange
            completes in ``step()`` and a read in between sees this rank's own gradient.
        steps_in_backward: with the parameter mix, the shell may update a bucket from
            backward as soon as its gradient is complete and hand its values to
            :meth:`ready` at once (:mod:`gossipgrad.engine.bucket.early`); ``exchange_``
            then posts only the buckets not handed over.
        header_bytes: bytes each bucket's message carries besides the bucket.
        codecs: codecs of the timing's own (a lagged frame's), besides the shell's.
    """

    ready_hooks = False
    forward_waits = False
    completes_in_backward = False
    steps_in_backward = False
    header_bytes = 0
    codecs: tuple[Any, ...] = ()

    def ready(self, index: int, buf: torch.Tensor, tag: int, step: int) -> None:
        """Bucket ``index``'s gradients are complete (backward hook); with
        ``steps_in_backward``, its updated values."""

    def reset_step(self) -> None:
        """A new step's gradients begin (``zero_grad``)."""

    def before_update(self, step: int) -> None:
        """Just before the optimizer's update of ``step``."""

    def exchange_(self, bufs: list[torch.Tensor], tag: int, step: int) -> None:
        """Step ``step``'s exchange of ``bufs`` (one per bucket, tags ``tag + index``)."""
        raise NotImplementedError

    def wait_(self, indices: list[int] | None = None) -> None:
        """Wait until the buckets ``indices`` (default: all) in flight are mixed in."""

    @property
    def in_flight(self) -> int:
        """Buckets posted and not yet mixed in."""
        return 0

    def behind(self, step: int) -> bool:
        """Whether this rank should skip ``step``'s compute to catch up."""
        return False

    def skip_(self, step: int, optimizer: torch.optim.Optimizer) -> None:
        """``step``'s exchange without a gradient of this rank's (after :meth:`behind`)."""
        raise RuntimeError("skip_step() needs max_lag >= 1 (--max-lag)")

    def drain_(self, step: int) -> bool:
        """Complete what is in flight; True when an optimizer step is owed (gradient halves
        still to apply)."""
        self.wait_()
        return False

    def settle_(self, step: int) -> bool:
        """:meth:`drain_`, except where draining drops what the next step would apply."""
        return self.drain_(step)

    def average_(self, model: torch.nn.Module, comm: Communicator) -> None:
        """After :meth:`drain_`: the global average (one consensus model)."""
        average_parameters_(model, comm)

    def close(self, step: int) -> None:
        """Collective, after :meth:`drain_`: leave no message unmatched, stop threads."""

    def plan_(self, total: int) -> None:
        """The run is ``total`` steps long (a window of the run's needs it; none here)."""

    def rebase_(self) -> None:
        """The parameters were replaced (a checkpoint loaded, a global average): whatever
        the timing remembers of them starts again from their values now."""

    def exchange_counts(self, start: int, end: int) -> dict[str, int] | None:
        """How many exchanges of each kind steps ``start`` to ``end`` took, where not
        one every step (None: one every step)."""
        return None

    def abandon(self) -> None:
        """After a rank died: forget what is in flight (its communicator is revoked)."""

    def stats(self) -> dict[str, Any]:
        """What waiting cost this rank (lagged only)."""
        return {"lag_waits": 0, "lag_wait_seconds": 0.0, "max_peer_ahead": 0}
