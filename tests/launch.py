"""Launching real processes from tests: the venv's own mpiexec, with a deadline on each run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mpiexec() -> str:
    """The mpiexec next to this Python (the pip MPICH); the PATH one only as a fallback."""
    sibling = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    path = sibling if os.path.exists(sibling) else shutil.which("mpiexec")
    if path is None:
        raise RuntimeError("no mpiexec found: pip install 'gossipgrad[mpich]'")
    return path


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(extra)
    return e


def run(cmd: list[str], timeout: float, **extra: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` with the repo on PYTHONPATH; a run past ``timeout`` fails the test."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=env(**extra), cwd=REPO, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout} s:\n"
                             f"{exc.stdout}\n{exc.stderr}") from None


def gossipgrad(n: int, args: list[str], timeout: float = 240, **extra: str):
    """``mpiexec -n N python -m gossipgrad ARGS`` (no launcher when n == 0)."""
    cmd = [sys.executable, "-m", "gossipgrad", *args]
    if n:
        cmd = [mpiexec(), "-n", str(n), *cmd]
    return run(cmd, timeout, **extra)


def rank_pid(root: int, rank: int) -> int:
    """The pid of the python process that MPI started as ``rank`` (its PMI_RANK), under the
    launcher process ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                envs = f.read().split(b"\0")
            with open(f"/proc/{pid}/comm", "rb") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith(b"python") and f"PMI_RANK={rank}".encode() in envs:
            return pid
    raise AssertionError(f"rank {rank} not found under pid {root}")
