"""The language-model task on the thread world (2 ranks): the GPT's allreduce step equals one
process's step on the joined batch, step for step; the background shuffle moves whole
text windows; ``train`` reports loss, perplexity and tokens/s, not accuracy."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import gossipgrad
from gossipgrad.comm.local import run_ranks
from gossipgrad.data.corpus import stdlib_dir
from gossipgrad.data.sources import open_source
from gossipgrad.engine.run import trainer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.models import build_model
from gossipgrad.options import DataOptions
from gossipgrad.shuffle import ShuffleWorker

torch.set_num_threads(1)

STEPS, BATCH, CONTEXT = 6, 3, 16


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lm") / "difflib.txt"
    path.write_bytes((Path(stdlib_dir()) / "difflib.py").read_bytes()[:20_000])
    return path


def _fresh(start: dict) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The GPT at ``start`` (built in the main thread: torch's seed is one for all threads)."""
    model = build_model("gpt", (CONTEXT,), 256, hidden=16, layers=2, heads=2)
    model.load_state_dict(start)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def _batch(windows: torch.Tensor, step: int, rank: int | None) -> tuple:
    """Step ``step``'s draw of 2 x BATCH windows: ``rank``'s half, or all (None)."""
    g = torch.Generator().manual_seed(step)
    w = windows[torch.randperm(len(windows), generator=g)[: 2 * BATCH]].long()
    w = w if rank is None else w[rank * BATCH : (rank + 1) * BATCH]
    return w[:, :-1], w[:, 1:]


def _steps(model, opt, batches, clip_over) -> list[float]:
    """A plain LM loop; ``clip_over(model, opt)`` is what gradient clipping reads."""
    losses = []
    for step in range(STEPS):
        x, y = batches(step)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(clip_over(model, opt), 0.5)
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def _compare(text: Path, clip_over) -> tuple[float, float]:
    """Largest differences (step losses: the ranks' mean; final parameters) between
    allreduce at 2 ranks and one process on the joined batches."""
    source = open_source(DataOptions(dataset=f"text:{text}", context=CONTEXT), rank=0, size=1)
    windows = source.store.read_all().payload
    torch.manual_seed(0)
    start = build_model("gpt", (CONTEXT,), 256, hidden=16, layers=2, heads=2).state_dict()

    def body(comm):
        model, adamw = _fresh(start)
        opt = gossipgrad.DistributedOptimizer(adamw, model, comm, strategy="allreduce")
        try:
            losses = _steps(model, opt, lambda s: _batch(windows, s, comm.rank), clip_over)
        finally:
            opt.close()
        return losses, torch.cat([p.detach().flatten() for p in model.parameters()])

    (l0, p0), (l1, p1) = run_ranks(2, body, timeout=120)
    assert torch.equal(p0, p1)  # allreduce: one model
    model, adamw = _fresh(start)
    ref = _steps(model, adamw, lambda s: _batch(windows, s, None), clip_over)
    ref_p = torch.cat([p.detach().flatten() for p in model.parameters()])
    mean = (np.array(l0) + np.array(l1)) / 2
    return float(np.abs(mean - np.array(ref)).max()), float((p0 - ref_p).abs().max())


def _groups(model, opt):
    return [p for g in opt.param_groups for p in g["params"]]


@pytest.mark.timeout(180)
def test_allreduce_is_one_process_on_the_joined_batch_step_for_step(text: Path):
    """AdamW with clipping over the optimizer's parameters (reading ``param_groups`` after
    backward completes the exchange): equal up to the order of float additions."""
    loss_diff, param_diff = _compare(text, _groups)
    assert loss_diff < 1e-5 and param_diff < 1e-5, (loss_diff, param_diff)


@pytest.mark.timeout(180)
def test_clipping_over_the_model_parameters_sees_the_averaged_gradients(text: Path):
    loss_diff, param_diff = _compare(text, lambda model, opt: model.parameters())
    assert loss_diff < 1e-5 and param_diff < 1e-5, (loss_diff, param_diff)


@pytest.mark.timeout(120)
def test_the_shuffle_moves_whole_windows(text: Path):
    opts = DataOptions(dataset=f"text:{text}", context=CONTEXT, batch_size=4)

    def body(comm):
        source = open_source(opts, rank=comm.rank, size=2, seed=0)
        before = source.store.read_all()
        with ShuffleWorker(source.store, comm, samples=8, every=1, seed=0) as worker:
            for step in range(20):
                worker.on_step(step)
        after = source.store.read_all()
        x, y = next(source.train_batches(0))
        assert torch.equal(x[:, 1:], y[:, :-1])
        return before, after

    (b0, a0), (b1, a1) = run_ranks(2, body, timeout=100)
    assert np.array_equal(np.sort(np.r_[b0.ids, b1.ids]), np.sort(np.r_[a0.ids, a1.ids]))
    assert not np.array_equal(np.sort(b0.ids), np.sort(a0.ids))  # some windows moved
    # a window arrives whole, with its label: the same bytes as where it came from
    home = {
        int(i): (w, lab)
        for b in (b0, b1)
        for i, w, lab in zip(b.ids, b.payload, b.labels, strict=True)
    }
    for a in (a0, a1):
        for i, w, lab in zip(a.ids, a.payload, a.labels, strict=True):
            assert torch.equal(home[int(i)][0], w) and home[int(i)][1] == lab


@pytest.mark.timeout(240)
def test_train_reports_loss_perplexity_and_tokens_per_second(text: Path, tmp_path: Path):
    cfg = TrainConfig.from_flags(
        arch="gpt",
        dataset=f"text:{text}",
        optimizer="adamw",
        lr=3e-3,
        hidden=16,
        layers=1,
        heads=2,
        context=CONTEXT,
        batch_size=8,
        max_steps=8,
        print_freq=4,
        shuffle_every=1,
        progress=False,
        metrics_out=str(tmp_path / "m.jsonl"),
    )
    summaries = run_ranks(2, lambda c: trainer.train(cfg, c), timeout=200, comm_timeout=60)
    s = summaries[0]
    assert s["steps"] == 8 and s["test_perplexity"] == pytest.approx(math.exp(s["test_loss"]))
    assert 1.0 < s["test_perplexity"] < 256.0  # learnt something in 8 steps
    assert s["tokens_per_s"] == pytest.approx(s["samples_per_s"] * CONTEXT)
    assert s["tokens_per_s_per_rank"] == pytest.approx(s["tokens_per_s"] / 2)
    assert "top1" not in s and "test_accuracy" not in s
    records = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    logs = [r for r in records if r["event"] == "log"]
    assert [r["step"] for r in logs] == [4, 8]
    for r in logs:
        assert r["train_perplexity"] == pytest.approx(math.exp(r["loss"]))
        assert r["tokens_per_s_per_rank"] > 0 and "train_accuracy" not in r
    (ev,) = [r for r in records if r["event"] == "eval"]
    assert ev["val_tokens"] > 0 and ev["test_loss"] == s["test_loss"]
