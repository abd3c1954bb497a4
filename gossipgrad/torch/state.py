"""The face's one piece of global state: this process's communicator, as Horovod keeps
one (``hvd.init()`` then ``hvd.rank()`` anywhere). The rest of gossipgrad takes the
communicator as an argument; only this face, whose API is global by definition, holds it.

``init()`` also arranges two things a Horovod script never asks for but relies on:

- at exit, every live optimizer is closed (its end-of-run agreement: ranks that ended
  after different numbers of steps without ``join()`` fail with a message naming the
  rank that stopped first, instead of its peers timing out);
- an uncaught exception on one rank ends every rank (``MPI_Abort``, as ``python -m
  mpi4py`` does), instead of leaving the others to wait for it until the deadline.
"""

from __future__ import annotations

import atexit
import logging
import sys
import weakref
from typing import Any

from gossipgrad import runtime
from gossipgrad.comm.base import Communicator
from gossipgrad.options import DEFAULT_TIMEOUT_S

log = logging.getLogger("gossipgrad")

_STATE: dict[str, Any] = {"comm": None, "hooked": False}
_LIVE: weakref.WeakSet = weakref.WeakSet()


def init(comm: Any = None, timeout: float = DEFAULT_TIMEOUT_S, verbose: bool = False) -> None:
    """Start (once): MPI under a launcher, one rank otherwise. ``comm``: Horovod's
    argument, accepted only as None (every rank; process sets are refused)."""
    if comm is not None:
        raise ValueError(
            "gossipgrad.torch.init(comm=...): a sub-communicator or list of ranks is not "
            "supported; launch only the ranks you train on (mpiexec -n N) and call init()"
        )
    if _STATE["comm"] is not None:
        return
    _STATE["comm"] = runtime.init(timeout, verbose)
    if not _STATE["hooked"]:
        _STATE["hooked"] = True
        atexit.register(_close_at_exit)
        previous = sys.excepthook
        sys.excepthook = lambda *exc: _abort_on_exception(previous, *exc)


def communicator() -> Communicator:
    """This process's communicator; ValueError before :func:`init` (as Horovod's)."""
    comm = _STATE["comm"]
    if comm is None:
        raise ValueError(
            "gossipgrad.torch has not been initialized; call hvd.init() first "
            "(import gossipgrad.torch as hvd)"
        )
    return comm


def is_initialized() -> bool:
    return _STATE["comm"] is not None


def register(optimizer: Any) -> None:
    """An optimizer built by the face: ``join()`` and the exit hook find it here."""
    _LIVE.add(optimizer)


def live_optimizers() -> list[Any]:
    return sorted((o for o in _LIVE if not o._closed), key=lambda o: o.serial)


def shutdown() -> None:
    """Close every live optimizer (collective in effect); a later ``init()`` starts over
    with the same communicator."""
    for opt in live_optimizers():
        opt.close()


def _close_at_exit() -> None:
    comm = _STATE["comm"]
    try:
        shutdown()
    except RuntimeError as exc:  # an uneven end: every rank got the same message
        runtime.abort_job(comm, str(exc))


def _abort_on_exception(previous: Any, kind: Any, value: Any, tb: Any) -> None:
    previous(kind, value, tb)
    comm = _STATE["comm"]
    if comm is not None and comm.size > 1 and not issubclass(kind, KeyboardInterrupt):
        runtime.abort_job(comm, f"rank {comm.rank}: uncaught {kind.__name__}; ending every rank")
