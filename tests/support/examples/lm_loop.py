"""A nanoGPT-style language-model loop (AdamW, a learning-rate warm-up and cosine decay,
gradient clipping between backward and step, periodic evaluation), trained distributed
through either face, and checked against the same loop in one process on the combined
batch::

    mpiexec -n 2 python tests/support/examples/lm_loop.py --face hvd --face library
    mpiexec -n 2 python tests/support/examples/lm_loop.py --face library --strategy gossip

:func:`train` is the loop as a single-process script writes it; only the optimizer handed
to it differs (``hvd.DistributedOptimizer`` or ``gossipgrad.DistributedOptimizer``). It clips
the gradients of the optimizer's parameters (reading ``param_groups`` after backward
completes the exchange), not ``model.parameters()``: those still hold this rank's own
gradients, on the wire (docs/llm.md). Rank 0
then runs :func:`train` again in one process on every rank's batch joined (with plain
AdamW from the same start) and prints the largest difference of the per-step losses (the
ranks' mean) and of the final parameters: ``hvd MATCH loss 1.2e-07 params 3.4e-08``. With
gradient averaging the two are the same computation up to the order of float additions.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys

import torch
import torch.nn.functional as F

from gossipgrad.data.text import read_files, text_data
from gossipgrad.gpt import gpt

CONTEXT, BATCH = 32, 4


def get_batch(windows: torch.Tensor, step: int, *, rank: int, ranks: int, batch: int):
    """Step ``step``'s windows for ``rank`` of ``ranks`` (rank r takes the r-th slice of one
    seeded draw): inputs and their next tokens."""
    g = torch.Generator().manual_seed(1000 + step)
    pick = torch.randperm(len(windows), generator=g)[: batch * ranks]
    w = windows[pick[rank * batch : (rank + 1) * batch]].long()
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def estimate_loss(model: torch.nn.Module, val: torch.Tensor) -> float:
    model.eval()
    w = val[:64].long()
    logits = model(w[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), w[:, 1:].flatten())
    model.train()
    return float(loss)


def lr_at(step: int, steps: int, lr: float, warmup: int = 2) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    return 0.5 * lr * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))


def train(model, optimizer, data, val, steps: int, eval_every: int, lr: float = 3e-3, clip=1.0):
    """The loop: ``data(step)`` gives a batch. Returns the loss of every step and the
    evaluations ``(step, loss)``."""
    losses, evals = [], []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, steps, lr)
        x, y = data(step)
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(
            [p for g in optimizer.param_groups for p in g["params"]], clip
        )
        optimizer.step()
        losses.append(float(loss.detach()))
        if (step + 1) % eval_every == 0:
            evals.append((step + 1, estimate_loss(model, val)))
    return losses, evals


def build():
    torch.manual_seed(0)
    model = gpt((CONTEXT,), 256, hidden=32, layers=2, heads=2)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def distributed(face: str, strategy: str):
    """``(model, optimizer, rank, size, mean)`` of ``face``; ``mean`` averages a list of
    floats over the ranks."""
    model, adamw = build()
    if face == "hvd":
        import gossipgrad.torch as hvd

        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(adamw, root_rank=0)
        opt = hvd.DistributedOptimizer(
            adamw, named_parameters=model.named_parameters(), strategy=strategy
        )

        def mean(values):
            return hvd.allreduce(torch.tensor(values, dtype=torch.float64)).tolist()

        return model, opt, hvd.rank(), hvd.size(), mean
    import gossipgrad
    from gossipgrad.comm.base import ReduceOp
    from gossipgrad.comm.collectives import allreduce_

    comm = gossipgrad.init()
    opt = gossipgrad.DistributedOptimizer(adamw, model, comm, strategy=strategy)

    def mean(values):
        arr = torch.tensor(values, dtype=torch.float64).numpy()
        return (allreduce_(comm, arr, ReduceOp.SUM, what="losses") / comm.size).tolist()

    return model, opt, comm.rank, comm.size, mean


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--face", choices=["hvd", "library"], action="append", required=True)
    ap.add_argument("--strategy", default="allreduce")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    text = text_data(read_files("text"), CONTEXT)
    windows, val = text.train_x, text.test_x
    for face in args.face:
        model, opt, rank, size, mean = distributed(face, args.strategy)
        shard = functools.partial(get_batch, windows, rank=rank, ranks=size, batch=BATCH)
        losses, evals = train(model, opt, shard, val, args.steps, eval_every=4)
        opt.close()
        losses = mean(losses)
        if rank == 0:
            ref, ref_opt = build()
            joined = functools.partial(get_batch, windows, rank=0, ranks=1, batch=BATCH * size)
            ref_losses, _ = train(ref, ref_opt, joined, val, args.steps, eval_every=4)
            dl = max(abs(a - b) for a, b in zip(losses, ref_losses, strict=True))
            pairs = zip(model.parameters(), ref.parameters(), strict=True)
            dp = max(float((p - q).abs().max()) for p, q in pairs)
            print(f"{face} EVALS " + " ".join(f"{s}:{v:.4f}" for s, v in evals), flush=True)
            print(f"{face} MATCH loss {dl:.3g} params {dp:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
