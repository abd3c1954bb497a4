"""Configuration precedence of ``gossipgrad train``: flag > GOSSIPGRAD_* env > file > default.

The engine is replaced by a stub that records the TrainConfig it is given, so these run in
one process without training.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import gossipgrad.engine.run.trainer as trainer
import gossipgrad.runtime as runtime
from gossipgrad.cli import main
from gossipgrad.comm.local import LocalWorld
from gossipgrad.engine.run.config import TrainConfig


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch):
    """``resolved(args, env) -> TrainConfig`` as the engine would receive it."""
    for name in list(os.environ):
        if name.startswith("GOSSIPGRAD_"):
            monkeypatch.delenv(name)
    seen: list[TrainConfig] = []

    def fake_train(cfg: TrainConfig, comm, **_kw) -> dict:
        seen.append(cfg)
        return {"event": "summary"}

    monkeypatch.setattr(trainer, "train", fake_train)
    monkeypatch.setattr(runtime, "init", lambda *_a, **_kw: LocalWorld(1).communicators()[0])

    def run(args: list[str], env: dict[str, str] | None = None) -> SimpleNamespace:
        result = CliRunner().invoke(main, ["train", *args], env=env or {})
        assert result.exit_code == 0, result.output
        return SimpleNamespace(**seen.pop().to_dict())  # by flat option name

    return run


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.toml"
    path.write_text("lr = 0.5\nepochs = 7\nscale-lr = true\nweight_decay = 0.25\n")
    return path


def test_default_then_file_then_env_then_flag(resolved, config_file: Path) -> None:
    d = SimpleNamespace(**TrainConfig().to_dict())
    cfg = resolved([])
    assert (cfg.lr, cfg.epochs, cfg.scale_lr) == (d.lr, d.epochs, d.scale_lr)
    cfg = resolved(["--config", str(config_file)])
    assert (cfg.lr, cfg.epochs, cfg.scale_lr, cfg.weight_decay) == (0.5, 7, True, 0.25)
    env = {"GOSSIPGRAD_LR": "0.7", "GOSSIPGRAD_EPOCHS": "8", "GOSSIPGRAD_SCALE_LR": "false"}
    cfg = resolved(["--config", str(config_file)], env)
    assert (cfg.lr, cfg.epochs, cfg.scale_lr, cfg.weight_decay) == (0.7, 8, False, 0.25)
    cfg = resolved(["--config", str(config_file), "--lr", "0.9", "--scale-lr"], env)
    assert (cfg.lr, cfg.epochs, cfg.scale_lr, cfg.weight_decay) == (0.9, 8, True, 0.25)


def test_flag_order_does_not_matter_for_the_config_file(resolved, config_file: Path) -> None:
    cfg = resolved(["--lr", "0.9", "--config", str(config_file)])
    assert (cfg.lr, cfg.epochs) == (0.9, 7)


def test_imagenet_models_default_to_the_recipe_below_every_other_source(
    resolved, config_file: Path
) -> None:
    cfg = resolved(["-a", "resnet50", "-b", "64"])
    assert (cfg.lr, cfg.scale_lr, cfg.warmup_epochs, cfg.weight_decay, cfg.epochs) == (
        0.1 * 64 / 256,
        True,
        5.0,
        1e-4,
        90,
    )
    cfg = resolved(
        ["-a", "resnet50", "--config", str(config_file)], {"GOSSIPGRAD_WARMUP_EPOCHS": "0"}
    )
    assert (cfg.lr, cfg.epochs, cfg.weight_decay, cfg.warmup_epochs) == (0.5, 7, 0.25, 0.0)
    cfg = resolved(["-a", "googlenet", "--wd", "0"])
    assert cfg.weight_decay == 0.0 and cfg.epochs == 90
    assert resolved(["-a", "mlp"]).weight_decay == TrainConfig().optim.weight_decay


def test_unknown_option_in_the_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("learning_rate = 1\n")
    result = CliRunner().invoke(main, ["train", "--config", str(bad)])
    assert result.exit_code == 2 and "unknown option 'learning_rate'" in result.output


# --- the flags of PyTorch's ImageNet example ------------------------------------------


def test_pytorch_imagenet_flags_mean_what_they_mean_there(resolved, tmp_path: Path) -> None:
    cfg = resolved(
        [str(tmp_path), "-p", "5", "-e", "--learning-rate", "0.2", "--seed", "3", "-b", "16"]
    )
    assert (cfg.data, cfg.print_freq, cfg.evaluate, cfg.lr, cfg.seed, cfg.batch_size) == (
        str(tmp_path),
        5,
        True,
        0.2,
        3,
        16,
    )
    cfg = resolved(["--dummy", "--start-epoch", "0"])
    assert cfg.synthetic is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["--gpu", "0"], "--gpu (PyTorch's ImageNet example's flag) is not taken: each rank "),
        (["--world-size", "4"], "mpiexec -n N gossipgrad train"),
        (["--rank", "1"], "mpiexec -n N gossipgrad train"),
        (["--dist-url", "env://"], "rank 0 hands out the rendezvous itself"),
        (["--dist-backend", "nccl"], "--strategy ddp picks gloo (CPU) or nccl (CUDA)"),
        (["--multiprocessing-distributed"], "the launcher sets the ranks"),
        (["--start-epoch", "5"], "pass --resume FILE (or --resume auto with --run-dir)"),
        (["--pretrained"], "--pretrained loads torchvision's ImageNet weights: it needs --arch"),
        (["d1", "--data", "d2"], "DIR d1 and --data d2: give one"),
    ],
)
def test_flags_without_a_place_here_are_refused_with_a_pointer(args, message) -> None:
    result = CliRunner().invoke(main, ["train", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_pretrained_weights_that_cannot_be_fetched_fail_clearly(monkeypatch, tmp_path) -> None:
    import urllib.request

    import torch

    from gossipgrad.engine.run.pretrained import load_pretrained_
    from gossipgrad.models import build_model

    def offline(*_a, **_k):
        raise urllib.error.URLError("Name or service not known")

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    model = build_model("resnet18", (3, 32, 32), 1000)
    with pytest.raises(RuntimeError) as info:
        load_pretrained_(model, "resnet18")
    message = str(info.value)
    assert message.startswith("--pretrained: could not fetch ResNet18_Weights") or (
        message.startswith("pretrained=True: could not fetch ResNet18_Weights")
    ), message
    assert f"{torch.hub.get_dir()}/checkpoints" in message and "URLError" in message
