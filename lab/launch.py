"""Launching real processes from the lab's studies and the tests: the venv's own mpiexec."""

from __future__ import annotations

import os
import shutil
import sys


def mpiexec_path() -> str:
    """The mpiexec beside this Python (the ``mpich`` wheel's), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    path = beside if os.path.exists(beside) else shutil.which("mpiexec")
    if path is None:
        raise ValueError(
            "no mpiexec beside this Python or on PATH: pip install 'gossipgrad[mpich]'"
        )
    return path
