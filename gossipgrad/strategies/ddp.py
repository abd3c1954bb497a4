"""``--strategy ddp``: the same job through ``torch.nn.parallel.DistributedDataParallel``.

    mpiexec -n 4 python -m gossipgrad train --strategy ddp

``--wire bf16|fp16`` registers DDP's own compression hook (``bf16_compress_hook``,
``fp16_compress_hook``). No extra launcher: the torch.distributed process group takes its
rank and size from the communicator, and its rendezvous from rank 0 through it. Rank 0
binds a listening socket to an ephemeral port (no race for the port), hands it to a
``TCPStore`` and broadcasts ``host:port`` as raw bytes (:mod:`gossipgrad.comm.rendezvous`).
All ranks on one host: the store, Gloo and NCCL use loopback only (``127.0.0.1``;
``GLOO_SOCKET_IFNAME`` is set to the loopback interface while the group is created,
``NCCL_SOCKET_IFNAME`` for good, each unless already set); otherwise the interface that
:func:`~gossipgrad.comm.rendezvous.choose_interface` picks. Backend: gloo for CPU models,
nccl for CUDA ones. ``--comm-timeout`` is the process group's timeout, so a collective a
rank never joins fails (in backward) instead of hanging.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.rendezvous import choose_interface, same_host, share_address
from gossipgrad.engine.consensus import verify_identical
from gossipgrad.options import ExchangeOptions
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies.library import LibraryOptimizer, LibraryStrategy

log = logging.getLogger(__name__)


class DdpOptimizer(LibraryOptimizer):
    """DDP with DistributedOptimizer's interface; forward goes through ``module_for_forward``.

    Starting parameters come from DDP's own broadcast from rank 0 (at construction) and are
    verified identical through ``comm``. Buffers follow rank 0 at every forward
    (``broadcast_buffers=True``, DDP's default). Gradients are bucket views
    (``gradient_as_bucket_view=True``), as in gossipgrad's own buckets.
    """

    def _attach(
        self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, options: ExchangeOptions
    ) -> None:
        comm = self.comm
        device = next(model.parameters()).device
        backend = "nccl" if device.type == "cuda" else "gloo"
        self._owns_group = init_process_group(comm, backend)
        self.ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=self.bucket_mb,
            gradient_as_bucket_view=True,
        )
        hook = COMPRESS_HOOKS.get(options.wire)
        if hook is not None:  # DDP's own compression: each bucket cast before its allreduce
            self.ddp.register_comm_hook(None, getattr(default_hooks, hook))
        verify_identical(model, comm, when="after DistributedDataParallel's broadcast")
        self._forwarded = False
        self.ddp.register_forward_pre_hook(self._saw_forward)

    @property
    def module_for_forward(self) -> torch.nn.Module:
        return self.ddp

    def _saw_forward(self, module: torch.nn.Module, args: Any) -> None:
        self._forwarded = True

    def step(self, closure: Any = None) -> Any:
        """The optimizer step; DDP averaged the gradients during backward.

        Raises RuntimeError (size > 1) when no forward went through ``module_for_forward``
        since the last step: DDP then averaged nothing on this rank while the other ranks
        wait for it in their allreduce.
        """
        if self.communicates and not self._forwarded:
            raise RuntimeError(
                f"rank {self.comm.rank}, step {self.step_count}: no forward pass went through "
                "DDP's wrapper this step (an empty batch, e.g. every sample unreadable under "
                "--skip-corrupt, or the model called directly instead of "
                "opt.module_for_forward), so this rank cannot join the step's allreduce; "
                "--strategy ddp needs a non-empty batch on every rank at every step"
            )
        self._forwarded = False
        return super().step(closure)

    def close(self) -> None:
        if self._owns_group:
            dist.destroy_process_group()
            self._owns_group = False


COMPRESS_HOOKS = {"bf16": "bf16_compress_hook", "fp16": "fp16_compress_hook"}
"""``--wire`` -> the ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks`` hook that
casts each bucket to that type, allreduces it (divided by size first) and casts back: the
baseline a user of DDP would compare a lossy gossipgrad wire with."""


class Ddp(LibraryStrategy):
    name = "ddp"
    summary = "torch DistributedDataParallel (gloo on CPU, nccl on CUDA)"
    wires = ("fp32", *COMPRESS_HOOKS)
    own_collective = True  # torch.distributed's ring, not the job's MPI

    def build(self, optimizer: Any, model: Any, comm: Any, opts: Any, *, stager: Any) -> Any:
        return DdpOptimizer(optimizer, model, comm, opts)


STRATEGIES.register(Ddp.name, Ddp())


def init_process_group(comm: Communicator, backend: str) -> bool:
    """Start torch.distributed's default group on ``comm``'s ranks unless it exists;
    return whether we started it. Collective over ``comm``."""
    if dist.is_initialized():
        if dist.get_rank() != comm.rank or dist.get_world_size() != comm.size:
            raise ValueError(
                f"rank {comm.rank}: torch.distributed is already initialised as "
                f"rank {dist.get_rank()} of {dist.get_world_size()}, not "
                f"{comm.rank} of {comm.size} (--strategy ddp needs one process "
                "per rank)"
            )
        return False
    timeout = datetime.timedelta(seconds=comm.timeout)
    ifname, ip = choose_interface(same_host(comm))
    if backend == "nccl":  # NCCL reads it at its first collective, so it has to stay
        os.environ.setdefault("NCCL_SOCKET_IFNAME", ifname)
    listen_fd = None
    address = None
    if comm.rank == 0:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((ip, 0))
        sock.listen(max(128, comm.size))
        address = (ip, sock.getsockname()[1])
        listen_fd = sock.detach()  # the TCPStore owns (and closes) it from now on
    host, port = share_address(comm, address)
    store = dist.TCPStore(
        host,
        port,
        comm.size,
        is_master=comm.rank == 0,
        timeout=timeout,
        wait_for_workers=False,
        master_listen_fd=listen_fd,
    )
    gloo_ifname = os.environ.get("GLOO_SOCKET_IFNAME") or ifname  # the user's choice wins
    with _environment(GLOO_SOCKET_IFNAME=gloo_ifname):  # read when the group is created
        dist.init_process_group(
            backend, store=store, rank=comm.rank, world_size=comm.size, timeout=timeout
        )
    if comm.rank == 0:
        log.info(
            "torch.distributed %s: store %s:%d, interface %s, timeout %g s",
            backend,
            host,
            port,
            gloo_ifname,
            comm.timeout,
        )
    return True


@contextlib.contextmanager
def _environment(**values: str) -> Iterator[None]:
    """Set environment variables for the duration of the block, then restore them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
