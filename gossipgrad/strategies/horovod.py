"""``--strategy horovod``: the same job through ``horovod.torch`` on the same MPI world.

    mpiexec -n 4 python -m gossipgrad train --strategy horovod

Horovod is an optional extra (``bash scripts/install-horovod.sh``). MPI is initialised by
gossipgrad (mpi4py, ``MPI_THREAD_MULTIPLE``) first; ``hvd.init(comm=...)`` is then given
our communicator, which Horovod duplicates, so its traffic never mixes with ours and it
neither initialises nor finalises MPI. Run with one rank and no launcher, Horovod
initialises a singleton MPI itself. ``horovodrun --gloo`` starts Horovod ranks without MPI,
which gossipgrad's own communicator needs: launch with ``mpiexec``.

Each step: ``hvd.DistributedOptimizer`` allreduces (averages) every gradient from a hook
as backward produces it; Horovod's background thread fuses what is ready each cycle into
one buffer of at most ``HOROVOD_FUSION_THRESHOLD`` bytes (set from ``--bucket-mb`` unless
already in the environment). ``step()`` polls those allreduces against ``--comm-timeout``
before the optimizer runs, so a missing rank ends in :class:`CommTimeout`, not a hang.
``--wire fp16`` passes ``compression=hvd.Compression.fp16`` (Horovod's only cast).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import torch

from gossipgrad.choices import timeout_hint
from gossipgrad.comm.base import CommTimeout, Communicator
from gossipgrad.engine.consensus import average_buffers_, verify_identical
from gossipgrad.options import ExchangeOptions, bucket_cap_bytes
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.library import LibraryOptimizer, LibraryStrategy

log = logging.getLogger(__name__)

INSTALL_HINT = "bash scripts/install-horovod.sh"
CYCLE_MS_DEFAULT = 5.0  # Horovod's cycle where HOROVOD_CYCLE_TIME is not set (see fusion_window_s)


def import_horovod() -> Any:
    """``horovod.torch``, or RuntimeError saying how to install it."""
    try:
        import horovod.torch as hvd
    except (ImportError, OSError) as exc:  # absent, or built against another torch/MPI
        raise RuntimeError(
            f"--strategy horovod needs Horovod, and `import horovod.torch` failed ({exc}); "
            f"build it into this Python with `{INSTALL_HINT} {sys.executable}` "
            "(about 7 CPU-minutes), or choose --strategy allreduce or ddp"
        ) from exc
    return hvd


class HorovodLibraryOptimizer(LibraryOptimizer):
    """``hvd.DistributedOptimizer`` with DistributedOptimizer's interface.

    ``.optimizer`` is Horovod's wrapper (a new optimizer over the same parameter groups;
    it holds the state). Starting parameters come from ``hvd.broadcast_parameters`` and are
    verified identical through ``comm``. Optimizer state is not broadcast (it is empty at
    construction, and a resumed checkpoint loads the same state on every rank), which also
    avoids ``broadcast_optimizer_state``'s pickles.
    """

    def _attach(
        self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, options: ExchangeOptions
    ) -> None:
        comm = self.comm
        self.hvd = import_horovod()
        self._owns_init = init_horovod(self.hvd, comm, bucket_cap_bytes(self.bucket_mb))
        self._stuck = False  # set when an allreduce passed its deadline
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        verify_identical(model, comm, when="after hvd.broadcast_parameters")
        compression = (  # --wire fp16: Horovod's own cast of each gradient before its allreduce
            self.hvd.Compression.fp16 if options.wire == "fp16" else self.hvd.Compression.none
        )
        self.optimizer = self.hvd.DistributedOptimizer(
            optimizer, named_parameters=model.named_parameters(), compression=compression
        )

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad()  # Horovod's takes no argument (and sets None)

    def step(self, closure: Any = None) -> Any:
        self._wait_for_allreduces()
        return super().step(closure)

    def _wait_for_allreduces(self) -> None:
        """Poll the allreduces backward started, against the communicator's deadline.

        Reads ``_handles`` of Horovod 0.28's ``_DistributedOptimizer`` (parameter or group
        -> (handle, ctx)); parameters whose hook never fired are submitted inside
        ``optimizer.step()`` and waited for there, without a deadline.
        """
        deadline = time.monotonic() + self.comm.timeout
        for key, (handle, _) in list(getattr(self.optimizer, "_handles", {}).items()):
            if handle is None or callable(handle):
                continue
            pause = 0.0
            while not self.hvd.poll(handle):
                if time.monotonic() > deadline:
                    self._stuck = True
                    name = self.optimizer._parameter_names.get(
                        key[0] if isinstance(key, tuple) else key, "?"
                    )
                    raise CommTimeout(
                        f"rank {self.comm.rank}, step {self.step_count}: Horovod's allreduce "
                        f"of {name} did not complete for {self.comm.timeout:g} s; is every "
                        "rank alive and at the same step? (past 60 s, Horovod's stall warning "
                        f"names the missing ranks) {timeout_hint()}"
                    )
                time.sleep(pause)
                pause = min(max(pause * 2, 2e-5), 1e-3)

    def _sync_buffers_(self) -> None:
        average_buffers_(self.model, self.comm)  # Horovod leaves buffers per rank

    def close(self) -> None:
        """Shut Horovod down if we started it. Its shutdown waits for its background thread,
        which a stopped peer leaves inside an MPI call forever, so it runs on a helper
        thread with the communicator's deadline (skipped after one of our waits timed out);
        past it, this rank carries on to the job's abort instead of hanging here."""
        if not self._owns_init:
            return
        self._owns_init = False
        if self._stuck:
            return
        done = threading.Thread(target=self.hvd.shutdown, name="horovod-shutdown", daemon=True)
        done.start()
        done.join(self.comm.timeout)
        if done.is_alive():
            log.warning(
                "rank %d: Horovod did not shut down within %g s (is a rank stuck?); leaving it",
                self.comm.rank,
                self.comm.timeout,
            )


def init_horovod(hvd: Any, comm: Communicator, fusion_bytes: int) -> bool:
    """Initialise Horovod on ``comm``'s ranks unless it already is; return whether we did.

    Raises ValueError when this world cannot host Horovod and RuntimeError when Horovod's
    world does not match ``comm`` (rank or size differ: built against another MPI?).
    """
    owns = not hvd.is_initialized()
    if owns:
        if not getattr(comm, "thread_multiple", True):
            raise ValueError(
                "--strategy horovod needs MPI_THREAD_MULTIPLE (Horovod calls MPI "
                "from its own thread); unset GOSSIPGRAD_MPI_THREAD_LEVEL"
            )
        handle = getattr(comm, "mpi4py_comm", None)
        if handle is None and os.environ.get("HOROVOD_CONTROLLER") == "gloo":
            raise ValueError(
                "started by `horovodrun --gloo`, without MPI, "
                "which gossipgrad's own communicator needs; launch with "
                "mpiexec -n N python -m gossipgrad train --strategy horovod"
            )
        if handle is None and comm.size > 1:
            raise ValueError(
                f"--strategy horovod needs an MPI world, not {comm!r}: launch "
                "with mpiexec -n N (horovodrun --gloo starts ranks without MPI)"
            )
        if "HOROVOD_FUSION_THRESHOLD" not in os.environ:
            os.environ["HOROVOD_FUSION_THRESHOLD"] = str(fusion_bytes)
        hvd.init(comm=handle)  # None: all of MPI_COMM_WORLD (a singleton without launcher)
    if hvd.rank() != comm.rank or hvd.size() != comm.size:
        raise RuntimeError(
            f"rank {comm.rank}: Horovod sees rank {hvd.rank()} of {hvd.size()}, gossipgrad "
            f"rank {comm.rank} of {comm.size}; is Horovod built against another MPI? check "
            f"with `mpiexec -n 2 {sys.executable} scripts/check-horovod.py`, rebuild with "
            f"`{INSTALL_HINT}`"
        )
    if comm.rank == 0:
        log.info(
            "horovod %s: mpi_enabled %s, fusion threshold %s bytes%s",
            getattr(sys.modules.get("horovod"), "__version__", "?"),
            hvd.mpi_enabled(),
            os.environ.get("HOROVOD_FUSION_THRESHOLD", "64 MiB (default)"),
            "" if owns else " (already initialised by the caller)",
        )
    return owns


class Horovod(LibraryStrategy):
    name = "horovod"
    summary = "horovod.torch's DistributedOptimizer (bash scripts/install-horovod.sh)"
    wraps_optimizer_class = True
    wires = ("fp32", "fp16")  # hvd.Compression.none, hvd.Compression.fp16

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return HorovodLibraryOptimizer(optimizer, model, comm, opts)

    def fusion_window_s(self) -> float | None:
        """Horovod's cycle: ``HOROVOD_CYCLE_TIME`` (ms) where set, else 5 ms (the larger of
        the defaults Horovod's releases have used, 1 and 5 ms: fewer, larger fused buffers).
        On the stand-in cluster it fused gradients as they became ready: its step equalled
        gossipgrad's allreduce at 1 MiB buckets, not at its 25 MiB fusion threshold
        (lab/records/standin.md, "Bucket size on the stand-in cluster")."""
        raw = os.environ.get("HOROVOD_CYCLE_TIME", "")
        try:
            ms = float(raw) if raw else CYCLE_MS_DEFAULT
        except ValueError:
            ms = CYCLE_MS_DEFAULT
        return max(0.0, ms) / 1000.0


STRATEGIES.register(Horovod.name, Horovod())
