"""Every user error is one line, never a traceback (docs/guarantees.md, 6), in one process:
config files (syntax, types, keys), junk runtime variables, refused checkpoints."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.settings import VARIABLES


def one_error(result, *needles: str) -> str:
    """The run ended with a usage error: one ``Error:`` line holding every needle."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert needle in errors[0], result.output
    return errors[0]


CONFIGS = [
    ("run.toml", "lr = = 1\n", ["run.toml", "cannot read", "line 1"]),
    ("run.toml", "[table\n", ["run.toml", "cannot read"]),
    ("run.yaml", "lr: [1\n", ["run.yaml", "cannot read", "line"]),
    ("run.yaml", "- 1\n- 2\n", ["run.yaml", "must hold a table"]),
    ("run.toml", "epochs = 1.5\n", ["'epochs' must be a whole number, got 1.5 (float)"]),
    ("run.toml", "epochs = true\n", ["'epochs' must be a whole number, got True (bool)"]),
    ("run.toml", "hidden = [1, 2]\n", ["'hidden' must be a whole number, got [1, 2] (list)"]),
    ("run.toml", 'lr = "fast"\n', ["'lr' must be a number, got 'fast' (str)"]),
    ("run.toml", "lr = nan\n", ["'lr' must be a finite number, got nan"]),
    ("run.toml", "shuffle = 3\n", ["'shuffle' must be true or false, got 3 (int)"]),
    ("run.toml", "resume = 5\n", ["'resume' must be a string, got 5 (int)"]),
    ("run.toml", "learning_rate = 0.1\n", ["unknown option 'learning_rate'"]),
]


@pytest.mark.parametrize(("name", "text", "needles"), CONFIGS, ids=[c[1] for c in CONFIGS])
def test_a_bad_config_file_is_one_line_naming_file_key_and_type(tmp_path, name, text, needles):
    path = tmp_path / name
    path.write_text(text)
    result = CliRunner().invoke(main, ["train", "--no-progress", "--config", str(path)])
    one_error(result, *needles)


JUNK = {"GOSSIPGRAD_MPI": "maybe", "OMP_NUM_THREADS": "zero"}


@pytest.mark.parametrize("var", [v.name for v in VARIABLES if v.kind != "text"])
def test_a_junk_runtime_variable_is_one_line_naming_it(monkeypatch, var: str):
    """The message was good but sat inside a traceback (settings were first read deep in
    start-up); now every variable is read before any work."""
    monkeypatch.setenv(var, JUNK.get(var, "junk:value:x"))
    result = CliRunner().invoke(main, ["train", "--no-progress"])
    one_error(result, f"{var}=", "expected")


def test_a_start_up_deadline_of_zero_is_refused_and_junk_waits_the_default(monkeypatch):
    """GOSSIPGRAD_START_TIMEOUT_S must be > 0 (one line naming it); before MPI starts a junk
    value keeps 60 s, so the rank still meets the others to report it."""
    from gossipgrad.startup import START_TIMEOUT_S, start_timeout_s

    monkeypatch.setenv("GOSSIPGRAD_START_TIMEOUT_S", "0")
    one_error(CliRunner().invoke(main, ["train", "--no-progress"]), "seconds > 0")
    assert start_timeout_s() == START_TIMEOUT_S == 60
    monkeypatch.setenv("GOSSIPGRAD_START_TIMEOUT_S", "junk")
    assert start_timeout_s() == START_TIMEOUT_S
    monkeypatch.setenv("GOSSIPGRAD_START_TIMEOUT_S", "4.5")
    assert start_timeout_s() == 4.5


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_malicious_checkpoint_is_refused_naming_the_global_and_no_unsafe_advice(tmp_path):
    path = tmp_path / "ckpt-000000010.pt"
    torch.save({"format": ckpt.FORMAT, "x": Evil()}, path)
    with pytest.raises(ValueError) as err:
        ckpt.read(str(path))
    message = str(err.value)
    assert "posix.system" in message and "may be malicious" in message, message
    assert "weights_only" not in message and "\n" not in message, message


def test_a_foreign_pickle_is_refused_without_unsafe_advice(tmp_path):
    path = tmp_path / "ckpt-000000010.pt"
    with open(path, "wb") as f:
        pickle.dump({"x": Evil()}, f)
    with pytest.raises(ValueError, match=f"cannot read checkpoint {path}") as err:
        ckpt.read(str(path))
    assert "weights_only" not in str(err.value) and "\n" not in str(err.value)


def test_refused_checkpoint_files_are_left_as_they_were(tmp_path: Path):
    path = tmp_path / "ckpt-000000010.pt"
    torch.save({"format": ckpt.FORMAT, "x": Evil()}, path)
    before = path.read_bytes()
    with pytest.raises(ValueError):
        ckpt.read(str(path))
    assert path.read_bytes() == before
