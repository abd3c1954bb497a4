"""Tests for scripts/emucluster.py: pure helpers anywhere; namespaces and shaping as root.

pytest tests/system/test_emucluster.py            # the netns tests skip unless root with iproute2
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch import needs_netns

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "emucluster.py"


def load_emunet():
    """scripts/emunet.py (the namespace half of emucluster) as a module."""
    spec = importlib.util.spec_from_file_location("emunet", SCRIPT.with_name("emunet.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def namespaces(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def test_parse_rate_and_addresses():
    emu = load_emunet()
    assert emu.parse_rate("1gbit") == 10**9
    assert emu.parse_rate("200mbit") == 200 * 10**6
    assert emu.parse_rate("1.5gbit") == 1_500_000_000
    with pytest.raises(ValueError, match="--rate"):
        emu.parse_rate("fast")
    assert emu.rank_address(0) == "10.213.0.1"
    assert emu.rank_address(255) == "10.213.1.0"


@pytest.mark.netns
@needs_netns
@pytest.mark.timeout(180)
def test_check_measures_the_shaped_rate_across_namespaces():
    rate_mbit = 200
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "check",
            "--rates",
            f"{rate_mbit}mbit",
            "--size-mb",
            "16",
            "--iters",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    shaped = next(r for r in report["runs"] if r["mode"] == "netns")
    host_tcp = next(r for r in report["runs"] if r["mode"] == "host-tcp")

    assert 0.5 * rate_mbit <= shaped["mbit_per_s"] <= 1.1 * rate_mbit, shaped
    # Unshaped TCP on the same host is far faster, so the number above is the shaping's.
    assert host_tcp["mbit_per_s"] > 2 * rate_mbit, host_tcp
    ranks = shaped["ranks"]
    assert ranks[0]["netns_inode"] != ranks[1]["netns_inode"]
    assert [r["addrs"] for r in ranks] == [["eth0 10.213.0.1/16"], ["eth0 10.213.0.2/16"]]
    prefix = ranks[0]["netns"].rpartition("-")[0] + "-"
    assert report["leftover_namespaces"] == []
    assert namespaces(prefix) == []


@pytest.mark.netns
@needs_netns
@pytest.mark.timeout(60)
def test_run_propagates_exit_code_and_removes_namespaces():
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "run",
            "-n",
            "3",
            "--rate",
            "1gbit",
            "--delay-ms",
            "7",
            "--",
            "sh",
            "-c",
            'test "$GOSSIPGRAD_INJECT_DELAY_MS" = 7 && exit 3',
        ],
    )
    assert proc.wait(timeout=50) == 3
    assert namespaces(f"gg{proc.pid}-") == []


@pytest.mark.netns
@needs_netns
@pytest.mark.timeout(120)
def test_ranks_per_node_share_a_namespace_and_gossip_node_finds_them(tmp_path):
    """--ranks-per-node 2 at 4 ranks: ranks 0-1 and 2-3 share a namespace (a node), and
    gossip-node groups them so without being told (hosts and namespaces)."""
    probe = (  # a file per rank: ranks' prints may share a line of the job's stdout
        "import os, json; from gossipgrad.runtime import init; comm = init(); "
        "from gossipgrad.comm.nodes import node_layout; row = json.dumps([comm.rank, "
        "os.environ['GOSSIPGRAD_EMU_NETNS'], node_layout(comm).nodes]); "
        f"open(f'{tmp_path}/rank-{{comm.rank}}.json', 'w').write(row)"
    )
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "-n", "4", "--ranks-per-node", "2", "--",
         sys.executable, "-c", probe],
        capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = sorted(json.loads(f.read_text()) for f in tmp_path.glob("rank-*.json"))
    assert [r[0] for r in rows] == [0, 1, 2, 3], proc.stdout
    assert rows[0][1] == rows[1][1] != rows[2][1] == rows[3][1]
    assert all(r[2] == [[0, 1], [2, 3]] for r in rows)
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "run", "-n", "3", "--ranks-per-node", "2", "--", "true"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "--ranks-per-node 2 does not divide -n 3" in bad.stderr


@pytest.mark.netns
@needs_netns
@pytest.mark.timeout(60)
def test_sigterm_stops_the_job_and_removes_namespaces():
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "run", "-n", "2", "--", "sleep", "300"],
        stderr=subprocess.PIPE,
    )
    prefix = f"gg{proc.pid}-"
    deadline = time.monotonic() + 30
    while len(namespaces(prefix)) < 3:  # two ranks and the bridge
        assert proc.poll() is None and time.monotonic() < deadline, "cluster never came up"
        time.sleep(0.2)
    time.sleep(1.0)  # let mpiexec start the ranks
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert namespaces(prefix) == []
