"""What every distributed optimizer (gossipgrad's own and the library adapters) exposes of
the ``torch.optim`` optimizer it wraps: checkpointable state and the parameter groups."""

from __future__ import annotations

from typing import Any

import torch


class WrappedOptimizer:
    """Mixin: ``state_dict``/``load_state_dict`` (the inner optimizer's state and the step
    count, plain tensors and ints) and ``param_groups`` (for learning-rate schedules)."""

    optimizer: torch.optim.Optimizer
    step_count: int

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "step": self.step_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count = int(state["step"])

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def behind(self) -> bool:
        """Whether to skip this step's compute to catch up (only gossip's ``--max-lag``
        does; see ``DistributedOptimizer.behind``)."""
        return False

    def skip_step(self) -> None:
        raise RuntimeError(f"{type(self).__name__} never skips a step (behind() is False)")
