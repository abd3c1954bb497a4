"""Check a Horovod build end to end: init, allreduce, and one DistributedOptimizer step.

    mpiexec -n 2 python scripts/check-horovod.py

Every rank prints `check-horovod: rank R/S ok` and exits 0 when all checks pass. Each check is
decided on values that every rank holds identically (results of collectives), so a failure
fails on all ranks at once instead of leaving one rank waiting in a collective.
"""

from __future__ import annotations

import sys

import horovod.torch as hvd
import torch

LR = 0.1


def fail(msg: str) -> None:
    print(f"check-horovod: rank {hvd.rank()}/{hvd.size()}: FAILED: {msg}", flush=True)
    sys.exit(1)


def check_allreduce(rank: int, size: int) -> None:
    x = torch.full((5,), float(rank + 1))
    total = hvd.allreduce(x, op=hvd.Sum, name="check.sum")
    mean = hvd.allreduce(x, name="check.mean")  # Average is horovod's default op
    want = size * (size + 1) / 2
    if not torch.allclose(total, torch.full((5,), want)):
        fail(f"allreduce Sum of rank+1 gave {total.tolist()}, expected {want}")
    if not torch.allclose(mean, torch.full((5,), want / size)):
        fail(f"allreduce Average of rank+1 gave {mean.tolist()}, expected {want / size}")


def spread(t: torch.Tensor, name: str) -> float:
    """max over ranks minus min over ranks, elementwise, then the largest: 0 if identical."""
    hi = hvd.allreduce(t, op=hvd.Max, name=f"{name}.max")
    lo = hvd.allreduce(t, op=hvd.Min, name=f"{name}.min")
    return float((hi - lo).abs().max())


def check_optimizer_step(rank: int) -> None:
    torch.manual_seed(1000 + rank)  # different initial weights on purpose
    model = torch.nn.Linear(4, 3)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    flat0 = torch.cat([p.detach().flatten() for p in model.parameters()])
    if spread(flat0, "check.init") != 0.0:
        fail("parameters differ across ranks after broadcast_parameters")

    x = torch.randn(8, 4)  # different data on each rank
    y = torch.randn(8, 3)
    # Expected update: p - LR * mean over ranks of the local gradient, computed independently.
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(model.state_dict())
    torch.nn.functional.mse_loss(ref(x), y).backward()
    local = torch.cat([p.grad.flatten() for p in ref.parameters()])
    expected = flat0 - LR * hvd.allreduce(local, name="check.grad")

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    flat1 = torch.cat([p.detach().flatten() for p in model.parameters()])
    if spread(flat1, "check.step") != 0.0:
        fail("parameters differ across ranks after a DistributedOptimizer step")
    err = float(hvd.allreduce((flat1 - expected).abs().max(), op=hvd.Max, name="check.err"))
    if err > 1e-5:
        fail(f"DistributedOptimizer step is off the averaged-gradient SGD step by {err:.2e}")


def main() -> None:
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if not hvd.mpi_built():
        fail("horovod was built without MPI; rebuild with scripts/install-horovod.sh")
    check_allreduce(rank, size)
    check_optimizer_step(rank)
    print(f"check-horovod: rank {rank}/{size} ok (mpi_enabled={hvd.mpi_enabled()})", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
