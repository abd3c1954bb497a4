"""No non-finite number goes unnoticed (docs/guarantees.md, 1), in one process: every numeric
option refuses NaN and infinity by name; a diverging run stops at its step with one message
and writes no checkpoint, keeping the good ones; a non-finite checkpoint is not resumed;
metrics are strict JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner

from gossipgrad.choices import spell
from gossipgrad.cli import main
from gossipgrad.cli.train import train
from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.agreement import AgreedError
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.engine.run import guards, trainer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.engine.run.metrics import MetricsWriter, to_json
from gossipgrad.options import DataOptions, ExchangeOptions, OptimOptions, RunOptions

torch.set_num_threads(1)

FLOAT_FLAGS = sorted(
    max(p.opts, key=len)  # the long spelling
    for p in train.params
    if isinstance(p.type, click.types.FloatParamType) and max(p.opts, key=len).startswith("--")
)


def test_train_has_float_options_to_check():
    assert {"--learning-rate", "--momentum", "--weight-decay", "--comm-timeout"} <= set(FLOAT_FLAGS)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e400"])
@pytest.mark.parametrize("flag", FLOAT_FLAGS)
def test_every_float_flag_refuses_non_finite_values_by_name(flag: str, value: str):
    result = CliRunner().invoke(main, ["train", "--no-progress", flag, value])
    assert result.exit_code == 2, result.output
    assert flag in result.output and "not a finite number" in result.output, result.output
    assert "Traceback" not in result.output


def _float_options(cli: click.Command, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for name, sub in getattr(cli, "commands", {}).items():
        out += _float_options(sub, f"{prefix} {name}".strip())
    for p in cli.params:
        if isinstance(p.type, click.types.FloatParamType):
            out.append((prefix, p.opts[-1]))
    return out


@pytest.mark.parametrize(("command", "flag"), _float_options(main))
def test_every_command_refuses_nan_for_every_float_option(command: str, flag: str):
    """Not only train: bench, plan, netfit, profile ... (their type is wrapped once)."""
    p = next(
        p for p in _command(command).params if p.opts[-1] == flag
    )  # the parameter itself: converting is enough, no command runs
    with pytest.raises(click.BadParameter, match="not a finite number"):
        p.type.convert("nan", p, None)


def _command(path: str) -> click.Command:
    cmd: click.Command = main
    for name in path.split():
        cmd = cmd.commands[name]  # type: ignore[attr-defined]
    return cmd


@pytest.mark.parametrize(
    ("build", "flag"),
    [
        (lambda v: OptimOptions(lr=v), "--lr"),
        (lambda v: OptimOptions(momentum=v), "--momentum"),
        (lambda v: OptimOptions(weight_decay=v), "--weight-decay"),
        (lambda v: OptimOptions(warmup_epochs=v), "--warmup-epochs"),
        (lambda v: ExchangeOptions(bucket_mb=v), "--bucket-mb"),
        (lambda v: ExchangeOptions(sync_threshold=v), "--sync-threshold"),
        (lambda v: RunOptions(comm_timeout=v), "--comm-timeout"),
        (lambda v: DataOptions(partition=f"dirichlet:{v}"), "--partition"),
    ],
)
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_option_objects_refuse_non_finite_values_by_name(build, flag: str, value: float):
    """The library API (no click) refuses them too: ``nan < 0`` is False, so a range check
    alone let NaN through. The message names the keyword argument (``choices.spell``)."""
    with pytest.raises(ValueError, match=spell(flag)):
        build(value)


def test_a_config_file_value_of_1e400_is_refused_naming_file_and_key(tmp_path: Path):
    path = tmp_path / "run.toml"
    path.write_text("lr = 1e400\n")
    result = CliRunner().invoke(main, ["train", "--config", str(path)])
    assert result.exit_code == 2, result.output
    assert f"{path}: 'lr' must be a finite number, got inf" in result.output


def test_non_finite_loss_becomes_a_stop_request_that_wins_over_a_signal():
    class Signals:
        received = 15  # SIGTERM already seen

    s = Signals()
    guards.note_loss(s, 0.5, 3)
    assert s.received == 15
    guards.note_loss(s, math.nan, 7)
    with pytest.raises(AgreedError, match="diverged.*at step 7"):
        guards.raise_if_diverged(s.received)
    guards.raise_if_diverged(15)  # a signal is not a divergence


def test_a_non_finite_checkpoint_is_refused_naming_the_tensor():
    state = {"model": {"w": torch.tensor([1.0, math.nan, math.inf])}, "optimizer": {}}
    with pytest.raises(ValueError, match=r"not finite \(w: 2 of 3 values nan or inf\)"):
        guards.check_checkpoint(state, "ckpt-000000004.pt")
    guards.check_checkpoint({"model": {"w": torch.ones(3)}, "optimizer": {}}, "x")


def test_metrics_are_strict_json(tmp_path: Path):
    path = tmp_path / "m.jsonl"
    writer = MetricsWriter(str(path), 0)
    writer.write({"loss": math.nan, "x": [math.inf, -math.inf, 1.5], "n": 3})
    writer.close()

    def refuse(token: str):
        raise ValueError(f"bare {token}")

    line = path.read_text().strip()
    assert json.loads(line, parse_constant=refuse) == {
        "loss": "nan",
        "n": 3,
        "x": ["inf", "-inf", 1.5],
    }
    assert "NaN" not in to_json({"a": math.nan})


CFG = dict(epochs=1, progress=False, print_freq=1, batch_size=64)


def config(**flags) -> TrainConfig:
    return TrainConfig.from_flags(**{**CFG, **flags})


def _checkpoints(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.glob("ckpt-*.pt"))}


@pytest.mark.parametrize("lr", ["1e30", "inf"])
def test_a_diverging_resume_stops_at_its_step_and_keeps_the_good_checkpoints(
    tmp_path: Path, lr: str
):
    """The issue's case: resuming with --lr inf (refused outright) or a finite 1e30 (which
    diverges) used to write non-finite checkpoints and prune both good ones."""
    run = tmp_path / "run"
    good = config(epochs=2, run_dir=str(run))
    run_ranks(2, lambda c: trainer.train(good, c), timeout=240, comm_timeout=60)
    before = _checkpoints(run)
    assert len([n for n in before if ".rank" not in n]) == 2, sorted(before)
    if lr == "inf":
        with pytest.raises(ValueError, match="lr must be a finite number"):  # library: lr
            config(lr=float(lr))
        return
    bad = config(epochs=4, run_dir=str(run), resume="auto", lr=1e30)
    with pytest.raises(AgreedError, match=r"training diverged: .* at step \d+") as err:
        run_ranks(2, lambda c: trainer.train(bad, c), timeout=240, comm_timeout=60)
    step = int(str(err.value).split("at step ")[1].split(";")[0])
    assert step >= max(int(n[5:14]) for n in before)  # after the resume point
    assert _checkpoints(run) == before  # nothing written, nothing pruned


def test_a_fresh_diverging_run_writes_only_finite_checkpoints(tmp_path: Path):
    """A checkpoint every step: the steps before the divergence (huge but finite values)
    are saved, the non-finite model is not."""
    run = tmp_path / "run"
    cfg = config(run_dir=str(run), lr=1e30, checkpoint_every=1)
    with pytest.raises(AgreedError, match="diverged|not finite"):
        run_ranks(2, lambda c: trainer.train(cfg, c), timeout=240, comm_timeout=60)
    for path in run.glob("ckpt-*.pt"):
        state = torch.load(path, weights_only=True)
        if "model" in state:
            guards.check_checkpoint(state, str(path))  # raises if one is not finite
    assert not list(run.glob("*.tmp"))


def test_a_checkpoint_with_nan_weights_is_not_resumed(tmp_path: Path):
    run = tmp_path / "run"
    good = config(run_dir=str(run))
    run_ranks(2, lambda c: trainer.train(good, c), timeout=240, comm_timeout=60)
    latest = ckpt.find_latest(str(run))
    state = torch.load(latest, weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name].view(-1)[0] = math.nan
    torch.save(state, latest)
    again = config(epochs=2, run_dir=str(run), resume="auto")
    with pytest.raises(ValueError, match=rf"{latest} is not finite \({name}: 1 of"):
        run_ranks(2, lambda c: trainer.train(again, c), timeout=240, comm_timeout=60)
