"""Checks of what a user reads between ``backward()`` and ``step()``, on any Communicator
(in-process: tests/inprocess/test_overlap.py; under mpiexec: tests/mpi/test_overlap_mpi.py).

With the gradient mix at lockstep the exchange completes at the end of backward (DDP's
order), so a loop that clips over ``model.parameters()`` (nanoGPT's) takes the same steps,
bit for bit, as one that completes the exchange itself first (``synchronize_gradients``).
"""

from __future__ import annotations

import torch

from gossipgrad.strategies import DistributedOptimizer, handle

from multirank.checks import require

CLIP = 0.05  # below every gradient norm of these steps: the clip always scales


def _model() -> torch.nn.Module:
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Linear(16, 3)
    )
    init = torch.Generator().manual_seed(0)  # private: the thread world shares torch's RNG
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=init) * 0.3)
    return model


def _clipped_run(comm, *, synchronize: bool, passes: int = 1, **options) -> torch.Tensor:
    """Six AdamW steps that clip between backward and step over ``model.parameters()``
    (``synchronize``: after completing the exchange explicitly); the final parameters."""
    model = _model()
    adamw = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    opt = DistributedOptimizer(
        adamw, model, comm, bucket_mb=0.0005, seed=3, backward_passes_per_step=passes, **options
    )
    gen = torch.Generator().manual_seed(100 + comm.rank)
    try:
        for _ in range(6):
            opt.zero_grad()
            for _ in range(passes):
                x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
                torch.nn.functional.cross_entropy(model(x), y).backward()
            if synchronize:
                handle(opt).synchronize_gradients()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            assert norm > CLIP, f"rank {comm.rank}: the clip must scale ({float(norm)})"
            opt.step()
    finally:
        opt.close()
    assert handle(opt).bucket_count > 1, "the check must exercise several buckets"
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_clipping_after_backward_reads_the_mixed_gradients(comm) -> None:
    """Gossip's gradient mix and allreduce, overlapped and blocking, one and two backward
    passes a step: clipping over the model's parameters right after backward equals
    clipping after ``synchronize_gradients()``, bit for bit."""
    require(comm.size > 1, "one rank exchanges nothing")
    cases = [
        {"strategy": "gossip", "mix": "grad", "overlap": True},
        {"strategy": "gossip", "mix": "grad", "overlap": False},
        {"strategy": "allreduce", "overlap": True},
        {"strategy": "gossip", "mix": "grad", "overlap": True, "passes": 2},
    ]
    for case in cases:
        plain = _clipped_run(comm, synchronize=False, **case)
        synced = _clipped_run(comm, synchronize=True, **case)
        assert torch.equal(plain, synced), f"rank {comm.rank} {case}: the clip read own gradients"


ALL = [check_clipping_after_backward_reads_the_mixed_gradients]
