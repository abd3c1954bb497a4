"""``gossipgrad bench`` in one process: argument errors, the one-rank refusal, the order
contenders run in (under mpiexec: tests/mpi/test_bench.py)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.tools.bench.strategies import run_order

from launch import gossipgrad


@pytest.mark.parametrize(
    "args,message",
    [
        (["exchange", "--sizes-mb", "1,x"], "--sizes-mb '1,x'"),
        (["exchange", "--sizes-mb", "0"], "every size must be > 0"),
        (["exchange", "--bucket-mb", "0"], "--bucket-mb"),
        (["exchange", "--reps", "0"], "--reps"),
        (["strategies", "--bucket-mb", "-1"], "--bucket-mb"),
        (["overlap", "--mix", "both"], "'both' is not one of"),
    ],
)
def test_bad_flags_are_usage_errors(args, message):
    result = CliRunner().invoke(main, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.timeout(120)
def test_one_rank_is_refused_with_the_launch_command():
    out = gossipgrad(0, ["bench", "exchange", "--sizes-mb", "0.01"], timeout=100)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "at least 2 ranks: mpiexec -n 2" in out.stderr


def test_horovod_runs_alone_after_the_others():
    """Its background thread negotiates every cycle even when idle: nothing shares its run."""
    assert run_order(["gossip", "horovod", "ddp", "local"]) == [
        ["gossip", "ddp", "local"],
        ["horovod"],
    ]
    assert run_order(["horovod"]) == [["horovod"]]
    assert run_order(["local", "gossip"]) == [["local", "gossip"]]
