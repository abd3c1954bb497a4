"""Checks of the step order around backward, on any Communicator (in-process:
tests/inprocess/test_overlap.py; under mpiexec: tests/mpi/test_overlap_mpi.py).

- With the gradient mix at lockstep the exchange completes at the end of backward (DDP's
  order), so a loop that clips over ``model.parameters()`` (nanoGPT's) takes the same steps,
  bit for bit, as one that completes the exchange itself first (``synchronize_gradients``).
- ``timing="early"`` (the parameter mix's per-bucket update and send from backward) gives
  lockstep's parameters at every step, for every codec, SGD with and without momentum and
  AdamW; where the per-bucket update is not valid it runs in lockstep's order (a clip, a
  GradScaler, a closure: found at the first step; an optimizer not known to update element
  by element: never tried) or, found later, refuses in one line.
"""

from __future__ import annotations

import torch

from gossipgrad.engine.bucket.early import Mode
from gossipgrad.registry import CODECS
from gossipgrad.strategies import DistributedOptimizer, build_optimizer, handle

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


OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
}


class _NotElementwise(torch.optim.SGD):
    """An SGD subclass: not known to update element by element (it could read norms)."""


def _param_run(comm, timing: str, optimizer: str, wire: str = "fp32", loop=None, **options):
    """Five steps with the parameter mix; the parameters after every step, and the engine.
    ``loop(opt, model, step, loss)`` replaces ``backward(); step()`` when given."""
    model = _model()
    make = OPTIMIZERS.get(optimizer, lambda ps: _NotElementwise(ps, lr=0.1))
    opt = build_optimizer(
        make(model.parameters()),
        model,
        comm,
        mix="param",
        timing=timing,
        wire=wire,
        bucket_mb=0.0005,
        seed=3,
        **options,
    )
    gen = torch.Generator().manual_seed(100 + comm.rank)
    history = []
    try:
        for step in range(5):
            x, y = torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if loop is None:
                loss.backward()
                opt.step()
            else:
                loop(opt, model, step, loss)
            opt.wait_parameters()  # the mix of this step, before it is recorded
            history.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    finally:
        opt.close()
    assert opt.bucket_count > 1, "the check must exercise several buckets"
    return history, opt


def _same_steps(comm, a: list[torch.Tensor], b: list[torch.Tensor], what: str) -> None:
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        diff = float((x - y).abs().max())
        assert diff <= 1e-6 * max(1.0, float(y.abs().max())), (
            f"rank {comm.rank} {what}: step {step} differs from lockstep by {diff}"
        )


def check_early_updates_equal_lockstep(comm) -> None:
    """Every codec (gossip; allreduce-param: fp32), SGD with and without momentum, AdamW: the
    per-bucket update from backward gives lockstep's parameters after every step, and it
    did run from backward at every step after the first (which watches)."""
    require(comm.size > 1, "one rank exchanges nothing")
    # allreduce-param takes lossless wires only (its own refusal)
    cases = [("gossip", wire) for wire in CODECS.names()] + [("allreduce-param", "fp32")]
    for strategy, wire in cases:
        for name in OPTIMIZERS:
            what = f"{strategy} {wire} {name}"
            ref, _ = _param_run(comm, "lockstep", name, wire, strategy=strategy)
            got, opt = _param_run(comm, "early", name, wire, strategy=strategy)
            assert opt._early.backward_steps == 4, f"{what}: not updated from backward"
            _same_steps(comm, got, ref, what)


def _clip(opt, model, step, loss):
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()


def _closure(opt, model, step, loss):
    loss.backward()
    opt.step(lambda: loss)


def _scaled():
    """A loop with a GradScaler of its own (one per run and rank)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=4.0)

    def loop(opt, model, step, loss):
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    return loop


def check_early_falls_back_to_lockstep_order(comm) -> None:
    """A clip between backward and step, a GradScaler, ``step(closure)`` at the first step,
    or an optimizer not known to update element by element: lockstep's order for the whole
    run (no bucket updated from backward), and lockstep's parameters."""
    require(comm.size > 1, "one rank exchanges nothing")
    cases = {  # optimizer, a new loop for each run, what the fallback says
        "clip": ("momentum", lambda: _clip, "gradients changed"),
        "closure": ("momentum", lambda: _closure, "step(closure)"),
        "scaler": ("sgd", _scaled, "GradScaler"),
        "not elementwise": ("other", lambda: None, "element by element"),
    }
    for what, (optimizer, loop, why) in cases.items():
        ref, _ = _param_run(comm, "lockstep", optimizer, loop=loop())
        got, opt = _param_run(comm, "early", optimizer, loop=loop())
        assert opt._early.mode is Mode.OFF and why in opt._early.why_not, (what, opt._early.why_not)
        assert opt._early.backward_steps == 0, f"{what}: updated from backward"
        _same_steps(comm, got, ref, what)


def check_early_refuses_a_later_change(comm) -> None:
    """Clipping that starts after buckets were updated from backward: one line naming both
    fixes, on every rank, at that step."""
    require(comm.size > 1, "one rank exchanges nothing")

    def late_clip(opt, model, step, loss):
        loss.backward()
        if step == 3:
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()

    try:
        _param_run(comm, "early", "momentum", loop=late_clip)
    except RuntimeError as exc:
        text = str(exc)
        assert text.startswith(f"rank {comm.rank}, step 3: the gradients changed"), text
        assert "from the first step on" in text and "timing='lockstep'" in text, text
        assert "\n" not in text, text
    else:
        raise AssertionError("a clip after per-bucket updates was not refused")


ALL = [
    check_clipping_after_backward_reads_the_mixed_gradients,
    check_early_updates_equal_lockstep,
    check_early_falls_back_to_lockstep_order,
    check_early_refuses_a_later_change,
]
