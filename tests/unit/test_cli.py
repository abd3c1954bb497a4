"""The command line: clear errors for bad input, and the schedule command (under mpiexec:
tests/mpi/test_cli_mpi.py)."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from gossipgrad.cli import main

from launch import run

BAD = [
    (["--arch", "vgg"], "'vgg' is not one of"),
    (["--dataset", "mnist"], "unknown dataset 'mnist'"),
    (["--topology", "ring"], "'ring' is not one of"),
    (["--batch-size", "0"], "--batch-size must be > 0, got 0"),
    (["--batch-size", "-3"], "--batch-size must be > 0, got -3"),
    (["--lr", "0"], "--lr must be > 0, got 0.0"),
    (["--lr", "-0.1"], "--lr must be > 0"),
    (["--bucket-mb", "0"], "--bucket-mb must be > 0"),
    (["--comm-timeout", "0"], "--comm-timeout must be > 0"),
    (["--epochs", "0"], "--epochs must be > 0"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_a_clear_error_not_a_traceback(args, message):
    result = CliRunner().invoke(main, ["train", "--no-progress", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_config_file_and_environment_precedence(tmp_path):
    from gossipgrad.cli.train import train

    seen = {}

    def fake_check(self, size=1):  # capture the resolved config, stop before training
        seen.update(self.to_dict())
        raise ValueError("stop here")

    cfg = tmp_path / "run.toml"
    cfg.write_text("lr = 0.5\nepochs = 3\nbatch-size = 16\n")
    import gossipgrad.engine.run.config as config

    orig = config.TrainConfig.check_size
    config.TrainConfig.check_size = fake_check
    try:
        CliRunner().invoke(
            train,
            ["--config", str(cfg), "--epochs", "7"],
            env={"GOSSIPGRAD_BATCH_SIZE": "24", "GOSSIPGRAD_EPOCHS": "5"},
        )
    finally:
        config.TrainConfig.check_size = orig
    assert seen["lr"] == 0.5  # file beats default
    assert seen["batch_size"] == 24  # env beats file
    assert seen["epochs"] == 7  # flag beats env


def test_config_file_with_unknown_key(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text("learning_rate = 0.5\n")
    result = CliRunner().invoke(main, ["train", "--config", str(cfg)])
    assert result.exit_code == 2 and "unknown option 'learning_rate'" in result.output


def test_schedule_command_prints_pairs_and_checks():
    result = CliRunner().invoke(
        main, ["schedule", "--size", "4", "--steps", "2", "--no-rotate", "--check"]
    )
    assert result.exit_code == 0, result.output
    assert "step   0 (cycle 0, dim 0): 0->1  1->0  2->3  3->2" in result.output
    assert "step   1 (cycle 0, dim 1): 0->2  1->3  2->0  3->1" in result.output
    assert "every send has its receive" in result.output


def test_schedule_json_and_dissemination():
    result = CliRunner().invoke(
        main,
        ["schedule", "-n", "3", "-k", "2", "--json", "--no-rotate", "--topology", "dissemination"],
    )
    data = json.loads(result.output)
    assert data["topology"] == "dissemination" and data["cycle_length"] == 2
    assert data["steps"][0] == [[1, 2], [2, 0], [0, 1]]


def test_schedule_hypercube_on_six_is_refused():
    result = CliRunner().invoke(main, ["schedule", "-n", "6", "--topology", "hypercube"])
    assert result.exit_code == 2 and "power-of-two" in result.output


def test_module_entry_point_runs():
    out = run([sys.executable, "-m", "gossipgrad", "--help"], timeout=60)
    assert out.returncode == 0 and "train" in out.stdout and "schedule" in out.stdout
