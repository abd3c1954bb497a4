"""Mixing rules: how a rank's own values and what it received combine (``--rule``).

Every exchange path calls the rule: a lockstep bucket (:mod:`gossipgrad.engine.bucket.mixer`), a
stale correction, a lagged frame (push-sum weights), a Linear layer's sufficient factors,
an allreduce's mean. The transport only moves bytes. A new rule is one module that
subclasses :class:`Average` (or writes the same methods) and registers a factory in
:data:`gossipgrad.registry.RULES`; ``--rule NAME:ARG`` hands ``ARG`` to the factory.

The default, ``average``, mixes with the schedule's weight w of the peer (1/2 on the
hypercube and dissemination schedules): ``x <- (1 - w) x + w x_peer``. Any w in (0, 1]
keeps the mean over ranks (the mixing matrix stays doubly stochastic when every rank uses
the same w with its one peer), and ``average:W`` fixes w::

    >>> import torch
    >>> rule = RULES.get("average")("0.25")
    >>> own, peer = torch.tensor([0.0, 4.0]), torch.tensor([4.0, 0.0])
    >>> rule.mix_(own, peer, scheduled=0.5); own.tolist()
    [1.0, 3.0]
"""

from __future__ import annotations

from typing import Any

import torch

from gossipgrad.registry import RULES


class Average:
    """``x <- (1 - w) x + w x_peer``, w the schedule's weight (or ``weight`` when given).

    Args:
        weight: the peer's share in every mix, in (0, 1]; None: the schedule's.

    Class attributes:
        outer: the rule takes an outer step after the mix (:meth:`outer_`), on the change
            since the last exchange; it needs a timing with local steps.
        stateful: it keeps per-rank state (saved in checkpoints as a rank state).
    """

    name = "average"
    outer = False
    stateful = False

    def bind(self, options: Any) -> Average:
        """This rule with what it reads of the exchange ``options`` (none, here)."""
        return self

    def outer_(self, index: int, anchor: torch.Tensor, mixed: torch.Tensor) -> None:
        """After the exchange of bucket ``index`` at an outer step: ``mixed`` (in place)
        becomes the new model, from it and ``anchor``, the bucket at the last exchange.
        The average takes no outer step: the mixed model is the new one."""

    def average_state_(self, comm: Any, identical: bool) -> None:
        """A global average of the models: any state of the rule's that differs between
        ranks becomes its mean (collective; ``identical``: it cannot differ)."""

    def __init__(self, weight: float | None = None) -> None:
        if weight is not None and not 0.0 < weight <= 1.0:
            raise ValueError(f"a mixing weight must be in (0, 1], got {weight}")
        self.fixed = weight

    def weight(self, scheduled: float) -> float:
        """The peer's share this step (0: an idle step, nothing is mixed)."""
        if scheduled == 0.0:
            return 0.0
        return scheduled if self.fixed is None else self.fixed

    def mix_(
        self,
        own: torch.Tensor,
        peer: torch.Tensor,
        scheduled: float,
        sent: torch.Tensor | None = None,
    ) -> None:
        """``own`` <- the mix with ``peer``, in place. ``sent``: the values the peer
        received from this rank (a lossy codec's decoding of ``own``); then ``own +=
        w (peer - sent)``, so the two partners move by the same quantized difference and
        the pair's sum is unchanged."""
        w = self.weight(scheduled)
        if w == 0.0:
            return
        if sent is not None:
            own.add_(peer.sub(sent), alpha=w)
        elif w == 0.5:
            own.add_(peer).mul_(0.5)  # (own + peer) / 2, bit for bit as it always was
        else:
            own.mul_(1.0 - w).add_(peer, alpha=w)

    def mix_product_(
        self,
        grad: torch.Tensor,
        dy: torch.Tensor,
        x: torch.Tensor,
        scheduled: float,
        sent: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """``grad`` <- the mix of this rank's gradient with the peer's ``dy^T x`` (a Linear
        layer's sufficient factors), in one product. ``sent``: the factors the peer
        received from this rank (a lossy codec's decoding); then ``grad += w (dy^T x -
        dy_sent^T x_sent)``, the same difference the peer applies with the other sign."""
        w = self.weight(scheduled)
        if not w:
            return
        if sent is not None:
            grad.addmm_(dy.t(), x, alpha=w).addmm_(sent[0].t(), sent[1], alpha=-w)
        else:
            grad.addmm_(dy.t(), x, beta=1.0 - w, alpha=w)

    def mean_(self, total: torch.Tensor, size: int) -> None:
        """An allreduce's sum over ``size`` ranks -> their mean, in place."""
        total.div_(size)

    def mean_product_(
        self, grad: torch.Tensor, dy: torch.Tensor, x: torch.Tensor, size: int
    ) -> None:
        """``grad`` <- the mean over ranks of ``dy_r^T x_r``, from the concatenated factors."""
        grad.addmm_(dy.t(), x, beta=0.0, alpha=1.0 / size)

    def split(self, mass: float, scheduled: float) -> tuple[float, float]:
        """Push-sum (bounded lag): of this rank's weight ``mass``, the part it keeps and
        the part it sends with its values (their sum is ``mass``)."""
        w = self.weight(scheduled)
        return mass * (1.0 - w), mass * w

    def __repr__(self) -> str:
        return f"{type(self).__name__}(weight={self.fixed})"


def average(argument: str | None) -> Average:
    """``--rule average`` (the schedule's weight) or ``average:W``."""
    if argument is None:
        return Average()
    try:
        weight = float(argument)
    except ValueError:
        raise ValueError(f"--rule average:{argument}: W must be a number in (0, 1]") from None
    return Average(weight)


def make_rule(spec: str, options: Any = None) -> Average:
    """The rule object of ``--rule NAME[:ARG]``, bound to the exchange ``options`` where
    given (the outer rule reads ``outer_lr`` and ``outer_momentum`` there)."""
    name, _, argument = spec.partition(":")
    rule = RULES.get(name)(argument or None)
    return rule if options is None else rule.bind(options)


RULES.register("average", average)
