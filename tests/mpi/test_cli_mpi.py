"""The command line under a real mpiexec: a refusal and --help printed once per job, not once
per rank (one process: tests/unit/test_cli.py)."""

from __future__ import annotations

import pytest

from launch import gossipgrad


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_hypercube_on_six_ranks_is_refused_once_for_every_rank():
    """Every rank refuses it, in the start-up agreement: one line (rank 0's), not six."""
    out = gossipgrad(6, ["train", "--topology", "hypercube", "--no-progress"], timeout=100)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("needs a power-of-two number of ranks, got 6") == 1, out.stderr
    assert "--topology dissemination" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_help_prints_once_per_job():
    out = gossipgrad(4, ["train", "--help"], timeout=100)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("Usage:") == 1, out.stdout
    assert "--learning-rate" in out.stdout and "[DIR]" in out.stdout
