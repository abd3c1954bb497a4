"""The shuffle under real MPI: launches tests/support/scripts/shuffle_check.py with mpiexec,
with deadlines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.mpi

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tests" / "support" / "scripts" / "shuffle_check.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"


def launch(n: int, rounds: int, *args: str, timeout: float = 240) -> dict:
    """Run the check on ``n`` ranks for ``rounds`` rounds; kill the whole launch (mpiexec and
    ranks) at the deadline. Besides the script's own checks (nothing lost or duplicated),
    holds its report to: every rank applied ``rounds`` rounds, and every rank ends holding
    samples that started on another rank."""
    args = ("--rounds", str(rounds), *args)
    if not MPIEXEC.exists():
        pytest.skip(f"no mpiexec next to {sys.executable}; install mpich (pip) in this venv")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    proc = subprocess.Popen(
        [str(MPIEXEC), "-n", str(n), sys.executable, str(CHECK), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"mpiexec -n {n} shuffle_check {' '.join(args)} still running after "
            f"{timeout} s:\n{out[-2000:]}\n{err[-4000:]}"
        )
    assert proc.returncode == 0, f"mpiexec -n {n} exited {proc.returncode}:\n{out}\n{err[-4000:]}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] and result["size"] == n
    assert result["rounds_done_min"] == result["rounds_done_max"] == rounds, result
    assert result["foreign_min"] > 0, f"some rank holds only its own samples: {result}"
    return result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("n", [7, 2])
def test_thousand_rounds_under_mpiexec(n: int) -> None:
    assert launch(n, 1000)["mode"] == "thread"


@pytest.mark.timeout(300)
def test_bytes_payloads_under_mpiexec() -> None:
    launch(3, 300, "--kind", "bytes")


@pytest.mark.timeout(300)
def test_inline_mode_when_mpi_serialises_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOSSIPGRAD_MPI_THREAD_LEVEL", "serialized")
    assert launch(3, 200)["mode"] == "inline"
