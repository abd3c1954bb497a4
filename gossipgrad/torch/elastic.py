"""Horovod's elastic mode, refused in one line: ``hvd.elastic.run``, ``hvd.elastic.State``,
``TorchState`` and ``ObjectState`` raise NotImplementedError naming what to use instead.

Horovod's elastic mode re-rendezvouses the workers after a failure and restarts the decorated
training function from the last ``state.commit()``, broadcasting rank 0's state. gossipgrad
keeps the job's size instead: under ``gossipgrad train --on-failure respawn`` a replacement
takes the dead rank's place, state and samples, and the loop goes on (docs/guarantees.md).
A script that uses ``DistributedOptimizer`` directly has no such loop for it to resume.
"""

from __future__ import annotations

from typing import Any, NoReturn

REFUSAL = (
    "gossipgrad.torch: hvd.elastic is not available (a script's own loop cannot be restarted "
    "on a new membership here); train with `gossipgrad train --on-failure respawn` under "
    "`mpiexec --with-ft ulfm`, where a replacement takes a dead rank's place, state and data"
)


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise NotImplementedError(REFUSAL)


run = _refuse


class State:
    """Refused: see :data:`REFUSAL`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse()


class TorchState(State):
    """Refused: see :data:`REFUSAL`."""


class ObjectState(State):
    """Refused: see :data:`REFUSAL`."""


__all__ = ["REFUSAL", "ObjectState", "State", "TorchState", "run"]
