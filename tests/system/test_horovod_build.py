"""The Horovod build (scripts/install-horovod.sh) works: scripts/check-horovod.py under 2 ranks.

pytest tests/system/test_horovod_build.py
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[2] / "scripts" / "check-horovod.py"


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else (shutil.which("mpiexec") or "mpiexec")


@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_check_horovod_passes_on_two_ranks():
    if importlib.util.find_spec("horovod") is None:
        pytest.skip("Horovod is not installed; build it with scripts/install-horovod.sh")
    proc = subprocess.run(
        [mpiexec(), "-n", "2", sys.executable, str(CHECK)],
        capture_output=True,
        text=True,
        timeout=110,
        env=dict(os.environ),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "rank 0/2 ok" in out and "rank 1/2 ok" in out, out
