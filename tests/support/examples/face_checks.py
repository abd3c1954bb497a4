"""Checks of ``gossipgrad.torch`` that need several real ranks; rank 0 prints ``PASS name``
for each (``mpiexec -n 4 python tests/support/examples/face_checks.py [names]``).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import gossipgrad.torch as hvd


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * hvd.rank() + step)
    return torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def check_tensor_collectives() -> None:
    r, n = hvd.rank(), hvd.size()
    assert hvd.allreduce(torch.tensor([float(r)])).item() == (n - 1) / 2
    assert hvd.allreduce(torch.tensor([r]), op=hvd.Sum).item() == n * (n - 1) // 2
    assert hvd.allreduce(torch.tensor([float(r)]), op=hvd.Max).item() == n - 1
    half = hvd.allreduce(torch.ones(3), compression=hvd.Compression.fp16)
    assert half.dtype == torch.float32 and torch.equal(half, torch.ones(3))
    t = torch.full((2,), float(r))
    hvd.allreduce_(t, op=hvd.Min)
    assert torch.equal(t, torch.zeros(2))
    gathered = hvd.allgather(torch.full((r + 1, 2), float(r)))
    assert gathered.shape == (n * (n + 1) // 2, 2)
    assert gathered[:, 0].tolist() == [float(k) for k in range(n) for _ in range(k + 1)]
    assert hvd.broadcast(torch.tensor([r + 10]), root_rank=n - 1).item() == n - 1 + 10
    handle = hvd.allreduce_async(torch.tensor([1.0]), name="x")
    assert hvd.poll(handle) and hvd.synchronize(handle).item() == 1.0
    state = hvd.broadcast_object({"epoch": 3, "w": torch.arange(3)} if r == 0 else None)
    assert state["epoch"] == 3 and state["w"].tolist() == [0, 1, 2]
    hvd.barrier()


def check_broadcast_object_refuses_what_would_be_unpickled() -> None:
    class Custom:
        pass

    try:
        hvd.broadcast_object(Custom() if hvd.rank() == 0 else None)
    except ValueError as exc:
        assert "torch.load(weights_only=True) does not rebuild" in str(exc), exc
    else:
        raise AssertionError("an arbitrary object crossed between ranks")


def check_refusals_name_what_to_use() -> None:
    model = _net()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    named = list(model.named_parameters())
    cases = [
        (dict(op=hvd.Adasum), "use hvd.Average"),
        (dict(op=hvd.Sum), "scale the learning rate by hvd.size()"),
        (dict(gradient_predivide_factor=2.0), "use 1.0 (the default)"),
        (dict(num_groups=2), "bucket_mb"),
        (dict(process_set=object()), "process sets are not supported"),
    ]
    from gossipgrad.registry import CODECS

    if "fp16" not in CODECS:  # another change adds the codec; then fp16 maps to it
        cases.append((dict(compression=hvd.Compression.fp16), "use hvd.Compression.none"))
    for kwargs, hint in cases:
        try:
            hvd.DistributedOptimizer(sgd, named_parameters=named, **kwargs)
        except ValueError as exc:
            assert hint in str(exc) and "\n" not in str(exc), (kwargs, exc)
        else:
            raise AssertionError(f"{kwargs} was accepted")


def check_synchronize_waits_for_gradients_and_does_not_average() -> None:
    """Horovod's AMP loop keeps ``synchronize()``: here it completes the gradient exchange
    only; before, it took a global average at every step."""
    model = _net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.5),
        named_parameters=model.named_parameters(),
        mix="grad",
        sync="off",
    )
    scaler = torch.amp.GradScaler("cpu")
    for step in range(6):
        x, y = _batch(step)
        opt.zero_grad()
        scaler.scale(F.cross_entropy(model(x), y)).backward()
        opt.synchronize()
        scaler.unscale_(opt)
        with opt.skip_synchronize():
            scaler.step(opt)
        scaler.update()
    distance = opt.consensus_distance()
    assert distance > 1e-8, f"the ranks hold one model ({distance}): synchronize averaged"
    opt.average()
    assert opt.consensus_distance() == 0.0
    opt.close()


def check_join_with_uneven_data() -> None:
    model = _net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    for step in range(4 + 2 * hvd.rank()):  # rank r has 4 + 2r batches
        x, y = _batch(step)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == hvd.size() - 1, last
    steps = hvd.allgather(torch.tensor([opt.step_count]))
    assert len(set(steps.tolist())) == 1, steps
    opt.close()


def check_rank0_resume_without_broadcast_fails_saying_broadcast() -> None:
    model = _net()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
    )
    if hvd.rank() == 0:
        with torch.no_grad():
            model[0].weight.add_(1.0)  # "checkpoint loaded" on rank 0 only
    x, y = _batch(0)
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    try:
        opt.step()
    except RuntimeError as exc:
        assert "broadcast_parameters(model.state_dict(), root_rank=0)" in str(exc), exc
    else:
        raise AssertionError("a model loaded on rank 0 only was trained on")
    finally:
        opt.close()


ALL = [v for k, v in sorted(globals().items()) if k.startswith("check_")]

if __name__ == "__main__":
    hvd.init()
    wanted = set(sys.argv[1:])
    for check in ALL:
        if not wanted or check.__name__ in wanted:
            check()
            hvd.barrier()
            if hvd.rank() == 0:
                print(f"PASS {check.__name__}", flush=True)
