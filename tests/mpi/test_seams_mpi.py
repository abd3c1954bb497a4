"""The seams under a real mpiexec: each toy plugin (tests/support/plugins/) trains the digits
job through ``gossipgrad train`` with ``GOSSIPGRAD_PLUGINS``; a plugin that cannot be
imported is one line (in-process, through the library: tests/inprocess/test_seams.py)."""

from __future__ import annotations

import json
import os

import pytest

from launch import PLUGINS
from launch import gossipgrad as launch_gossipgrad


def _train_with_plugin(tmp_path, plugin: str, *flags: str) -> dict:
    metrics = tmp_path / "m.jsonl"
    path = os.pathsep.join([PLUGINS, os.environ.get("PYTHONPATH", "")])
    out = launch_gossipgrad(
        4,
        ["train", "--no-progress", "--epochs", "8", "--metrics-out", str(metrics), *flags],
        timeout=400,
        GOSSIPGRAD_PLUGINS=plugin,
        PYTHONPATH=path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
@pytest.mark.timeout(500)
@pytest.mark.parametrize(
    "plugin, flags, field, value",
    [
        (
            "toy_strategy",
            ["--strategy", "toy-periodic", "--sync-every", "5"],
            "strategy",
            "toy-periodic",
        ),
        ("toy_rule", ["--rule", "toy30"], "rule", "toy30"),
        ("toy_codec", ["--wire", "toy-negate", "--mix", "grad"], "wire", "toy-negate"),
        ("toy_pairs", ["--strategy", "toy-pairs"], "strategy", "toy-pairs"),
        ("toy_every", ["--timing", "toy-every:2", "--mix", "param"], "timing", "toy-every:2"),
        ("toy_ring", ["--topology", "toy-ring"], "topology", "toy-ring"),
    ],
)
def test_a_plugin_trains_digits_through_the_command_line(tmp_path, plugin, flags, field, value):
    summary = _train_with_plugin(tmp_path, plugin, *flags)
    assert summary[field] == value and summary["size"] == 4, summary
    assert summary["top1"] > 0.9, summary


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path):
    out = launch_gossipgrad(0, ["train", "--help"], timeout=60, GOSSIPGRAD_PLUGINS="no_such_mod")
    assert out.returncode == 2
    assert "GOSSIPGRAD_PLUGINS: cannot import 'no_such_mod'" in out.stderr
    assert "Traceback" not in out.stderr
