"""A lab-only strategy, ``allreduce-param-moments``: parameter averaging that also averages
the optimizer's state (Adam's moments, SGD's momentum) over every rank after each step.

Loaded with ``GOSSIPGRAD_PLUGINS=lab.studies.moments_plugin`` by ``python -m lab
optimizers``, to test whether unmixed moments are why parameter averaging trails gradient
averaging with adaptive optimizers. Not a strategy to ship: it costs a second allreduce of
up to twice the model every step.
"""

from __future__ import annotations

from typing import Any

from gossipgrad.engine.bucket.shell import BucketOptimizer
from gossipgrad.engine.run.snapshot import average_optimizer_state_
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.allreduce_param import AllreduceParam


class MomentsOptimizer(BucketOptimizer):
    """The shell of allreduce-param; after each step every rank holds the mean state."""

    def step(self, closure: Any = None) -> Any:
        loss = super().step(closure)
        average_optimizer_state_(self.optimizer, self.comm)
        return loss


class AllreduceParamMoments(AllreduceParam):
    name = "allreduce-param-moments"
    summary = "lab only: allreduce-param that also averages the optimizer state every step"

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return MomentsOptimizer(
            optimizer, model, comm, opts, shape=self.exchange_shape, stager=stager
        )


STRATEGIES.register(AllreduceParamMoments.name, AllreduceParamMoments(), replace=True)
