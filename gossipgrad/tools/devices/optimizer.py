"""The stand-in device's optimizer: it waits the profile's optimizer time, updates nothing.

    opt = standin_optimizer(clock, profile, dilate, torch.optim.SGD(model.parameters(), lr=0.1))

Used through :meth:`gossipgrad.tools.devices.standin.Standin.optimizer`.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from gossipgrad.tools.devices.profile import StandinProfile


class StandinOptimizer(torch.optim.Optimizer):
    """Waits its share of the profile's optimizer time on the device; updates nothing.

    Subclassed per device by :func:`standin_optimizer` (the class carries the clock), so
    ``type(opt)(groups, **opt.defaults)``, as ``--strategy ps`` builds one per owned
    bucket, gives an optimizer on the same device that waits its parameters' share.
    """

    clock: ClassVar[Any] = None
    seconds_per_byte: ClassVar[float] = 0.0
    stands_for: ClassVar[type | None] = None  # the optimizer whose update it stands in for

    def __init__(self, params: Any, **defaults: Any) -> None:
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        nbytes = sum(p.numel() * p.element_size() for g in self.param_groups for p in g["params"])
        if self.clock is not None:
            self.clock.sync()  # the update needs the gradients the host waited for
            self.clock.run(nbytes * self.seconds_per_byte)
        return loss


def standin_optimizer(
    clock: Any, profile: StandinProfile, dilate: float, optimizer: torch.optim.Optimizer
) -> StandinOptimizer:
    """A :class:`StandinOptimizer` subclass bound to ``clock``, over ``optimizer``'s groups."""
    per_byte = profile.planner.optimizer_s * dilate / max(1, profile.planner.param_bytes)
    cls = type(
        f"Standin{type(optimizer).__name__}",
        (StandinOptimizer,),
        {"clock": clock, "seconds_per_byte": per_byte, "stands_for": type(optimizer)},
    )
    groups = [dict(g) for g in optimizer.param_groups]
    return cls(groups, **optimizer.defaults)
