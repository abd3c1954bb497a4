"""The distributed optimizer's protocol, and the torch optimizer every one of them is.

Every strategy's optimizer (gossip's shell, ps, the Horovod and DDP adapters, a plugin's)
subclasses :class:`WrappedOptimizer`: a ``torch.optim.Optimizer`` whose ``param_groups``
and ``state`` are those of the optimizer it wraps, so every learning-rate scheduler, step
hook and state-dict tool works on it, and a plain torch optimizer's state loads into it.
:class:`DistributedOptimizerProtocol` writes the protocol the trainer and the benchmarks use; its
optional capabilities are attributes with defaults here, never probed.

    >>> import torch
    >>> model = torch.nn.Linear(2, 1)
    >>> class Plain(WrappedOptimizer):  # no exchange: the wrapped optimizer's step
    ...     def step(self, closure=None):
    ...         return self.optimizer.step(closure)
    >>> opt = Plain(torch.optim.SGD(model.parameters(), lr=0.1), model)
    >>> sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    >>> opt.step(); sched.step(); opt.param_groups[0]["lr"]
    0.05
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.schedule import Schedule
from gossipgrad.engine.bucket.monitor import ConsensusMonitor
from gossipgrad.engine.optim import is_adaptive

STATE_KEY = "gossipgrad"
"""The key of a distributed optimizer's own state (step count, codec residuals) inside its
``state_dict()``; the rest is the wrapped torch optimizer's state dict, as torch writes it."""


@runtime_checkable
class DistributedOptimizerProtocol(Protocol):
    """What the training step, the trainer, checkpoints and benchmarks use.

    ``behind()`` / ``skip_step()``: a rank may skip a step's compute to catch up (bounded
    lag; never elsewhere). ``drain()`` completes what is in flight; ``synchronize()`` makes
    one consensus model on every rank (collective); ``consensus_distance()`` measures the
    drift (collective); ``module_for_forward`` is what the forward pass calls (DDP's
    wrapper, else the model). ``close()`` leaves no message unmatched.
    """

    optimizer: torch.optim.Optimizer
    model: torch.nn.Module
    comm: Communicator
    #: Whether its waits on the wire go through gossipgrad's communicators, so that a step's
    #: exposed wire time is measured (:func:`gossipgrad.comm.base.blocking`).
    waits_seen: bool
    schedule: Schedule
    step_count: int
    strategy: str
    monitor: ConsensusMonitor | None
    rank_states: dict[str, Any]
    bucket_count: int
    wire_codecs: tuple[Any, ...]

    @property
    def param_groups(self) -> list[dict[str, Any]]: ...

    @property
    def module_for_forward(self) -> torch.nn.Module: ...

    @property
    def factor_table(self) -> list[dict[str, Any]] | None: ...

    def zero_grad(self, set_to_none: bool = False) -> None: ...

    def step(self, closure: Any = None) -> Any: ...

    def behind(self) -> bool: ...

    def skip_step(self) -> None: ...

    def drain(self) -> None: ...

    def settle(self) -> None: ...

    def synchronize(self) -> None: ...

    def consensus_distance(self) -> float: ...

    def bytes_sent_per_step(self) -> float: ...

    def lag_stats(self) -> dict[str, Any]: ...

    def plan_steps(self, total: int) -> None: ...

    def exchange_stats(self, start: int, end: int) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class WrappedOptimizer(torch.optim.Optimizer):
    """A ``torch.optim.Optimizer`` that wraps ``optimizer`` (and shares its groups and state).

    Args:
        optimizer: the torch optimizer that does the update (kept as ``.optimizer``; a
            subclass may replace it, e.g. Horovod's wrapper).
        model: the module being trained.
        comm: the communicator (None: set by the subclass).
        options: the exchange options (None: set by the subclass); they give
            ``strategy`` and the partner ``schedule`` every rank checks at start-up (and
            checkpoints record), whether or not the strategy sends along it.

    Subclasses implement the exchange; this base gives the protocol's defaults (no lag, no
    monitor, no factors, no per-rank state) and the checkpoint format: ``state_dict()`` is
    the wrapped optimizer's state dict plus ``{"gossipgrad": {"step": ..., <rank state>}}``,
    and ``load_state_dict`` takes that or a plain torch optimizer's state dict (the step
    count is then kept). ``rank_states`` maps names to this rank's own stateful parts
    (``state_dict``/``load_state_dict``), which differ between ranks.
    """

    strategy = ""
    monitor: ConsensusMonitor | None = None
    bucket_count = 0
    waits_seen = True
    #: The codec instances this optimizer encodes with (none: the library's own wire).
    wire_codecs: tuple[Any, ...] = ()

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: torch.nn.Module,
        comm: Communicator | None = None,
        options: Any = None,
    ) -> None:
        # Deliberately not super().__init__(): the groups and state are the wrapped one's.
        self.optimizer, self.model = optimizer, model
        if comm is not None:
            self.comm = comm
        if options is not None:
            if hasattr(options, "bind"):  # the mix's default rule, for this optimizer
                options = options.bind(is_adaptive(optimizer))
            self.options, self.strategy = options, options.strategy
            size = comm.size if comm is not None else 1
            self.schedule = Schedule(size, options.rank_topology, options.seed, options.rotate)
        self.step_count = 0
        self.rank_states: dict[str, Any] = {}
        self.defaults = optimizer.defaults
        self._optimizer_step_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_step_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_pre_hooks: OrderedDict = OrderedDict()
        self._optimizer_load_state_dict_post_hooks: OrderedDict = OrderedDict()
        self._patch_step_function()
        self._warned_capturable_if_run_uncaptured = True

    # -- shared with the wrapped optimizer -------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        raise ValueError(
            f"{type(self).__name__} cannot take a parameter group after it was built (its "
            "buckets and hooks are fixed); add every group to the torch optimizer before "
            "wrapping it"
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(strategy={self.strategy!r}, {self.optimizer!r})"

    # -- the protocol's defaults -------------------------------------------------------------
    @property
    def module_for_forward(self) -> torch.nn.Module:
        return self.model

    @property
    def factor_table(self) -> list[dict[str, Any]] | None:
        """The sufficient-factor decision per Linear layer (None: none, or not made yet)."""
        return None

    @property
    def exchange_topology(self) -> str:
        """The topology the exchange's partners follow, resolved (``auto`` named as what
        it chose): the ranks' schedule's, unless the transport schedules something else."""
        return self.schedule.topology

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def behind(self) -> bool:
        """Whether to skip this step's compute to catch up (only bounded lag does)."""
        return False

    def skip_step(self) -> None:
        raise RuntimeError(f"{type(self).__name__} never skips a step (behind() is False)")

    def drain(self) -> None:
        """Complete what is in flight (nothing, here)."""

    def settle(self) -> None:
        """Complete what is in flight and leave training as it would have gone on: what
        a bench calls to charge the exchanges to the steps that posted them, between
        segments of one run (:meth:`drain`, before a global average or the end, may drop
        an exchange that the average makes moot)."""
        self.drain()

    def lag_stats(self) -> dict[str, Any]:
        """What waiting for lagged peers cost this rank (zeros without bounded lag)."""
        return {"lag_waits": 0, "lag_wait_seconds": 0.0, "max_peer_ahead": 0}

    def close(self) -> None:
        """Leave nothing in flight (nothing, here)."""

    def plan_steps(self, total: int) -> None:
        """The run is ``total`` steps long (nothing here needs to know)."""

    def exchange_stats(self, start: int, end: int) -> dict[str, Any]:
        """Steps ``start`` to ``end``: the bytes this rank sent in their exchanges (one
        exchange every step here)."""
        return {"exchange_bytes": self.bytes_sent_per_step() * (end - start)}  # type: ignore[attr-defined]

    def allow_different_start(self) -> None:
        """The ranks' parameters differ on purpose from here on (a mixing experiment that
        sets them per rank): the next step does not check that they start identical
        (:mod:`gossipgrad.engine.bucket.startcheck`)."""
        check = getattr(self, "_start", None)
        if check is not None:
            check.pending = False

    def __enter__(self) -> WrappedOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()  # with an exception propagating, close() sees it (sys.exc_info)

    # -- checkpoints -------------------------------------------------------------------------
    def own_state(self) -> dict[str, Any]:
        """This optimizer's own state besides the wrapped one's: the step count and, by
        name, each of :attr:`rank_states` (this rank's: a ps shard, a codec's residuals;
        the trainer saves those in per-rank files instead)."""
        return {"step": self.step_count, **{k: v.state_dict() for k, v in self.rank_states.items()}}

    def load_own_state(self, state: dict[str, Any]) -> None:
        self.step_count = int(state.get("step", self.step_count))
        for name, obj in self.rank_states.items():
            if name in state:
                obj.load_state_dict(state[name])

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        out = dict(self.optimizer.state_dict())
        out[STATE_KEY] = self.own_state()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
        """Load :meth:`state_dict`'s output, or a plain torch optimizer's state dict (then
        the step count is kept)."""
        state = dict(state)
        own = state.pop(STATE_KEY, None)
        self.optimizer.load_state_dict(state)
        if own is not None:
            self.load_own_state(own)
        check = getattr(self, "_start", None)
        if check is not None:  # the next step checks that every rank loaded the same
            check.arm(after_load=True)


def handle(opt: Any) -> Any:
    """The engine's optimizer behind ``opt`` (the library's
    :class:`gossipgrad.DistributedOptimizer`, or already an engine optimizer): its exchange,
    buckets, schedule and protocol, for the engine, the tools and the tests."""
    return getattr(opt, "_engine", opt)
