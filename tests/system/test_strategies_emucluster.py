"""DDP and Horovod with each rank in its own network namespace (scripts/emucluster.py; root
and iproute2): the rendezvous picks rank 0's eth0 and the job trains the model it trains on
one host."""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from launch import (
    REPO,
    gossipgrad,
    needs_horovod,
    needs_netns,
    run,
)


@pytest.mark.netns
@needs_netns
@pytest.mark.timeout(240)
@pytest.mark.parametrize("strategy", ["ddp", pytest.param("horovod", marks=needs_horovod)])
def test_library_strategies_across_namespaces(strategy):
    """Each rank in its own network namespace (scripts/emucluster.py), so loopback is not
    shared: DDP's rendezvous must pick rank 0's eth0 address, and Horovod's MPI goes over
    TCP. Same seed, same size: the same model as on one host."""
    out = run(
        [
            sys.executable,
            os.path.join(REPO, "scripts", "emucluster.py"),
            "run",
            "-n",
            "2",
            "--rate",
            "1gbit",
            "--",
            sys.executable,
            "-m",
            "gossipgrad",
            "train",
            "--strategy",
            strategy,
            "--no-progress",
            "--epochs",
            "2",
        ],
        timeout=200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["size"] == 2 and summary["consensus_distance"] == 0.0
    if strategy == "ddp":
        assert re.search(r"store 10\.213\.0\.1:\d+, interface eth0", out.stderr), out.stderr
    one_host = gossipgrad(
        2, ["train", "--strategy", strategy, "--no-progress", "--epochs", "2"], timeout=200
    )
    assert one_host.returncode == 0, one_host.stderr[-3000:]
    local = json.loads(one_host.stdout.strip().splitlines()[-1])
    assert summary["test_loss"] == pytest.approx(local["test_loss"], rel=1e-6)
