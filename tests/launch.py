"""Launching real processes from tests: the venv's own mpiexec, with a deadline on each run.

Two MPIs: the MPICH wheel in the test venv (``mpiexec()``), and Open MPI 5 with ULFM in
``.venv-ompi`` beside it (``ompi_command()``; ``scripts/test.sh`` builds it). Without
``.venv-ompi`` the Open MPI tests skip, except under CI, where they fail.
"""

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


def start_gossipgrad(n: int, args: list[str], **extra: str) -> subprocess.Popen:
    """Start ``mpiexec -n N python -m gossipgrad ARGS`` without waiting (see ``finish``)."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "gossipgrad", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env(**extra), cwd=REPO, stdin=subprocess.DEVNULL)


def finish(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Wait for ``proc``; past ``timeout`` kill it and fail with its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{proc.args} did not finish within {timeout} s:\n"
                             f"{out}\n{err}") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


OMPI_VENV = os.path.join(REPO, ".venv-ompi")
OMPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def ompi_command(n: int, args: list[str], ulfm: bool = True) -> list[str]:
    """``mpiexec [--with-ft ulfm] -n N python -m gossipgrad ARGS`` with Open MPI's venv;
    skips the test (fails it under CI) when ``.venv-ompi`` is missing."""
    import pytest

    python, launcher = (os.path.join(OMPI_VENV, "bin", x) for x in ("python", "mpiexec"))
    if not os.path.exists(launcher):
        why = f"no Open MPI venv at {OMPI_VENV} (bash scripts/test.sh builds it)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    ft = ["--with-ft", "ulfm"] if ulfm else []
    return [launcher, *ft, "--oversubscribe", "-n", str(n), python, "-m", "gossipgrad", *args]


def rank_pids(root: int) -> dict[int, int]:
    """``{rank: pid}`` of the MPI ranks (processes with ``PMI_RANK``, or Open MPI's
    ``OMPI_COMM_WORLD_RANK``) below process ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry))
    ranks, todo = {}, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env_vars = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        key = next((k for k in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK") if k in env_vars), None)
        if key is not None and pid != root:
            rank = int(env_vars[key])
            ranks.setdefault(rank, pid)  # the rank, not its DataLoader workers (children)
    return ranks


def rank_pid(root: int, rank: int) -> int:
    """The pid of MPI rank ``rank`` under the launcher process ``root``."""
    pids = rank_pids(root)
    if rank not in pids:
        raise AssertionError(f"rank {rank} not found under pid {root} (found {sorted(pids)})")
    return pids[rank]
