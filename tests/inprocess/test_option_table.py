"""The option table: every option declared once, and what is made from it (the command line,
``GOSSIPGRAD_*`` parsing for both library faces, config-file typing, the docs' table). An
option added from the tests alone (tests/support/plugins/toy_option.py) shows up everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import toy_option  # registers --toy-knob (tests/support/plugins, on sys.path: conftest)

from gossipgrad.cli.options import train_table
from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ExchangeOptions, Mix, from_environment, markdown
from gossipgrad.strategies import build_optimizer

REPO = Path(__file__).resolve().parents[2]
PLUGINS = str(REPO / "tests" / "support" / "plugins")


def test_every_option_has_one_flag_one_variable_and_help():
    table = train_table()
    flags = [f for o in table if o.cli for f in (o.flag_name, *o.aliases)]
    assert len(flags) == len(set(flags)), sorted(f for f in flags if flags.count(f) > 1)
    names = [o.name for o in table]
    assert len(names) == len(set(names))
    for o in table:
        assert o.env == "GOSSIPGRAD_" + o.flag_name[2:].replace("-", "_").upper()
        assert o.text.strip(), o.name


def test_a_plugin_option_reaches_the_exchange_from_a_keyword_and_a_variable():
    assert toy_option.NAME in {o.name for o in train_table()}
    assert TrainConfig.from_flags(toy_knob=5).exchange.extra == {"toy_knob": 5}
    env = {"GOSSIPGRAD_TOY_KNOB": "7", "GOSSIPGRAD_MIX": "grad"}
    assert from_environment(ExchangeOptions, env) == {"mix": "grad", "extras": (("toy_knob", 7),)}
    with pytest.raises(ValueError, match="GOSSIPGRAD_TOY_KNOB='x': expected a whole number"):
        from_environment(ExchangeOptions, {"GOSSIPGRAD_TOY_KNOB": "x"})
    assert "| `--toy-knob` | `GOSSIPGRAD_TOY_KNOB` | `3` |" in markdown(train_table())


def test_the_variables_steer_both_library_faces(monkeypatch):
    """A ported script passes no options: ``GOSSIPGRAD_STRATEGY`` and ``GOSSIPGRAD_MIX``
    choose them for ``gossipgrad.DistributedOptimizer`` as for ``gossipgrad.torch``."""

    def options(comm, **kw):
        model = torch.nn.Linear(2, 2)
        sgd = torch.optim.SGD(model.parameters(), lr=0.1)
        opt = build_optimizer(sgd, model, comm, **kw)
        opt.close()
        return opt.options

    monkeypatch.setenv("GOSSIPGRAD_STRATEGY", "allreduce")
    assert run_ranks(2, options)[0].strategy == "allreduce"
    monkeypatch.setenv("GOSSIPGRAD_STRATEGY", "gossip")
    monkeypatch.setenv("GOSSIPGRAD_MIX", "grad")
    assert run_ranks(2, options)[0].mix is Mix.GRAD
    assert run_ranks(2, lambda c: options(c, mix="param"))[0].mix is Mix.PARAM  # keyword wins


def _train(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), PLUGINS]),
        "GOSSIPGRAD_PLUGINS": "toy_option",
        **env,
    }
    cmd = [sys.executable, "-m", "gossipgrad", "train", "--max-steps", "1", "--no-progress", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=tmp_path, timeout=120)


def _knob(out: subprocess.CompletedProcess) -> int:
    assert out.returncode == 0, out.stdout + out.stderr
    line = next(ln for ln in out.stderr.splitlines() if "configuration: " in ln)
    return json.loads(line.split("configuration: ", 1)[1])["toy_knob"]


@pytest.mark.timeout(400)
def test_a_plugin_option_is_on_the_command_line_in_the_environment_and_in_a_config_file(
    tmp_path,
):
    help_text = _train(tmp_path, "--help").stdout
    assert "--toy-knob INTEGER" in help_text and "GOSSIPGRAD_TOY_KNOB" in help_text
    config = tmp_path / "c.toml"
    config.write_text("toy-knob = 9\n")
    assert _knob(_train(tmp_path, "--config", str(config))) == 9
    assert _knob(_train(tmp_path, "--config", str(config), GOSSIPGRAD_TOY_KNOB="7")) == 7
    assert _knob(_train(tmp_path, "--toy-knob", "5", GOSSIPGRAD_TOY_KNOB="7")) == 5
    config.write_text("toy-knob = 1.5\n")
    bad = _train(tmp_path, "--config", str(config))
    assert bad.returncode == 2 and "'toy-knob' must be a whole number, got 1.5" in bad.stderr
