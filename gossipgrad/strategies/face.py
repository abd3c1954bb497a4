"""The library's face: :class:`DistributedOptimizer`, a ``torch.optim.Optimizer`` with a few
names of its own, one meaning each; the engine's optimizer behind it is reached with
:func:`handle` (what the benchmarks, the tools and the tests use).

Complete example (run as ``mpiexec -n 4 python example.py``, or plainly for one rank)::

    import torch
    import gossipgrad

    comm = gossipgrad.init()
    model = torch.nn.Linear(8, 2)
    with gossipgrad.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), model, comm
    ) as opt:
        for _ in range(10):
            x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        opt.join()     # ranks that ran out of data wait here for the others
        opt.average()  # one consensus model on every rank

Its names besides torch's (``param_groups``, ``state``, ``state_dict``,
``load_state_dict``, ``add_param_group``): ``step`` (the exchange and the update; under a
bounded lag it also catches a slow rank up, so the loop never branches), ``zero_grad``,
``no_sync()`` (accumulate without exchanging), ``average()`` (a global average: one model),
``consensus_distance()``, ``join()``, ``close()`` (or ``with``), ``stats`` (read-only
figures) and ``module_for_forward`` (the module to call: the model, or DDP's wrapper).
Horovod's words (``synchronize``, ``broadcast_parameters``) are ``gossipgrad.torch``'s.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.staging import Stager
from gossipgrad.engine.protocol import handle  # noqa: F401 - re-exported
from gossipgrad.options import ExchangeOptions, exchange_options


class DistributedOptimizer(torch.optim.Optimizer):
    """Wrap ``optimizer`` so that each ``step()`` also exchanges, by ``options.strategy``.

    Keyword arguments override the options' fields (``strategy="allreduce"``,
    ``mix="grad"``, ``timing="lag:2"`` ...); without ``options``, the ``GOSSIPGRAD_*``
    variables that are set choose what no keyword does. The strategy's spec validates them
    and builds the engine's optimizer, which shares ``optimizer``'s ``param_groups`` and
    ``state``; so does this one (schedulers and checkpoints just work). Without ``mix``,
    gossip mixes gradients for an adaptive optimizer (Adam, AdamW ...) and parameters
    otherwise. Collective: every rank calls it with the same options.
    """

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
        # Deliberately not super().__init__(): the groups and state are the wrapped one's.
        if not (hasattr(optimizer, "step") and hasattr(optimizer, "param_groups")):
            raise TypeError(
                "DistributedOptimizer(optimizer, model, comm, options=None, **overrides) "
                f"takes a torch optimizer first, got {optimizer!r}; pass the strategy as "
                "strategy=..."
            )
        self._engine = build_optimizer(optimizer, model, comm, options, stager=stager, **overrides)
        self.defaults = optimizer.defaults
        self._optimizer_step_pre_hooks: dict = {}
        self._optimizer_step_post_hooks: dict = {}
        self._optimizer_state_dict_pre_hooks: dict = {}
        self._optimizer_state_dict_post_hooks: dict = {}
        self._optimizer_load_state_dict_pre_hooks: dict = {}
        self._optimizer_load_state_dict_post_hooks: dict = {}

    # -- torch's -----------------------------------------------------------------------
    # param_groups and state are the engine's (read between backward() and step(), the
    # groups hold the exchanged gradients, as DDP's do after its backward).
    param_groups = property(
        lambda self: self._engine.param_groups,
        lambda self, groups: setattr(self._engine, "param_groups", groups),
    )
    state = property(
        lambda self: self._engine.state, lambda self, s: setattr(self._engine, "state", s)
    )

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._engine.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """The wrapped optimizer's state dict plus this rank's exchange state and step."""
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:  # type: ignore[override]
        self._engine.load_state_dict(state)

    def __repr__(self) -> str:
        return f"gossipgrad.DistributedOptimizer({self._engine!r})"

    # -- its own -------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Zero the gradients (the bucket strategies keep them as views into their buckets,
        so ``set_to_none`` is taken as zeroing)."""
        self._engine.zero_grad(set_to_none=set_to_none)

    @property
    def _step_supports_amp_scaling(self) -> bool:  # GradScaler.step hands itself over
        return bool(getattr(self._engine, "_step_supports_amp_scaling", False))

    def step(self, closure: Any = None, **amp: Any) -> Any:
        """The exchange and the local update (in the order the strategy's mix says); returns
        the closure's loss if given. Under a bounded lag, a rank whose peers are ahead and
        whose compute is slower then takes exchange-only steps to catch up. (``amp``: what
        ``torch.amp.GradScaler.step`` hands over; every rank then skips the same steps.)"""
        loss = self._engine.step(closure, **amp)
        while self._engine.behind():
            self._engine.skip_step()
        return loss

    def no_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Inside, backward passes accumulate gradients and exchange nothing; the first
        backward after it exchanges (DDP's ``no_sync``)."""
        no_sync = getattr(self._engine, "no_sync", None)
        return no_sync() if no_sync is not None else contextlib.nullcontext()

    def average(self) -> None:
        """A global average of parameters and floating buffers: one consensus model on
        every rank (collective)."""
        self._engine.synchronize()

    def consensus_distance(self) -> float:
        """Collective: mean over ranks of ||x_i - mean||^2 / ||mean||^2 now."""
        return float(self._engine.consensus_distance())

    def join(self) -> int:
        """This rank has no more data: it takes exchange-only steps until every rank has
        joined (collective in effect); returns the rank that joined last."""
        return int(self._engine.join())

    def close(self) -> None:
        """Complete everything in flight and stop the threads (collective in effect)."""
        self._engine.close()

    def __enter__(self) -> DistributedOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def module_for_forward(self) -> torch.nn.Module:
        """The module to call forward on: the model, or the strategy's wrapper of it
        (``ddp``)."""
        return self._engine.module_for_forward

    @property
    def stats(self) -> dict[str, Any]:
        """Figures of the run so far (a new dict each read): strategy, step, bytes sent per
        step, buckets, what a bounded lag's waits cost, the consensus monitor's."""
        e = self._engine
        out = {
            "strategy": e.strategy,
            "step": e.step_count,
            "bytes_sent_per_step": e.bytes_sent_per_step(),
            "buckets": e.bucket_count,
            **e.lag_stats(),
        }
        if e.monitor is not None:
            out.update(e.monitor.summary())
        return out


def build_optimizer(
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    comm: Communicator,
    *args: Any,
    **kw: Any,
) -> Any:
    """The engine's optimizer that :class:`DistributedOptimizer` wraps, built from the same
    arguments (``options``, ``stager=``, keywords, variables): what the benchmarks and tools
    drive directly."""
    options = args[0] if args else kw.pop("options", None)
    stager = kw.pop("stager", None)
    opts = exchange_options(options, kw)
    return opts.spec.build(optimizer, model, comm, opts, stager=stager)
