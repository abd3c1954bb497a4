"""Launching real processes from tests: the venv's own mpiexec, with a deadline on each run.

Two MPIs: the MPICH wheel in the test venv (``mpiexec()``), and Open MPI 5 with ULFM in
``.venv-ompi`` beside it (``ompi_command()``; ``scripts/test.sh`` builds it). Without
``.venv-ompi`` the Open MPI tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from lab.launch import mpiexec_path

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: The toy strategy, rule and codec (tests/conftest.py puts it on sys.path too).
PLUGINS = os.path.join(REPO, "tests", "support", "plugins")

HAVE_HOROVOD = importlib.util.find_spec("horovod") is not None
needs_horovod = pytest.mark.skipif(
    not HAVE_HOROVOD, reason="build Horovod: bash scripts/install-horovod.sh"
)
needs_netns = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc")),
    reason="needs root and iproute2 (ip, tc) to create network namespaces",
)


JOIN_BYTES = 3 * 8
"""The most a rank's posted bytes per step gain from the join agreement (engine/bucket/join.py: an
allreduce of 3 int64 every few steps), which every strategy runs, ``local`` included."""


def mpiexec() -> str:
    """The mpiexec next to this Python (the pip MPICH); the PATH one only as a fallback."""
    return mpiexec_path()


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(extra)
    return e


def run(cmd: list[str], timeout: float, **extra: str) -> subprocess.CompletedProcess:
    """Run ``cmd`` with the repo on PYTHONPATH; a run past ``timeout`` fails the test."""
    try:
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env(**extra),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{' '.join(cmd)} did not finish within {timeout} s:\n{exc.stdout}\n{exc.stderr}"
        ) from None


def run_check_module(module: str, size: int, timeout: float, *flags: str):
    """``mpiexec -n SIZE python tests/support/multirank/run_checks.py MODULE FLAGS``: fails the test
    unless it exits 0 and rank 0 printed PASS for every check in ``multirank.MODULE.ALL``."""
    out = run(
        [
            mpiexec(),
            "-n",
            str(size),
            sys.executable,
            "tests/support/multirank/run_checks.py",
            module,
            *flags,
        ],
        timeout=timeout,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for check in importlib.import_module(f"multirank.{module}").ALL:
        assert f"PASS {check.__name__} on {size} ranks\n" in out.stdout, out.stdout
    return out


def bench_record(out: subprocess.CompletedProcess) -> dict:
    """The one JSON object a ``gossipgrad bench`` launch printed (on rank 0)."""
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, f"expected one JSON object on rank 0:\n{out.stdout}"
    return json.loads(lines[0])


def positive(x) -> bool:
    """A finite number > 0 (a measured time, rate or size)."""
    return isinstance(x, float | int) and math.isfinite(x) and x > 0


def gossipgrad(n: int, args: list[str], timeout: float = 240, **extra: str):
    """``mpiexec -n N python -m gossipgrad ARGS`` (no launcher when n == 0)."""
    return python_m("gossipgrad", n, args, timeout, **extra)


def lab(n: int, args: list[str], timeout: float = 240, **extra: str):
    """``mpiexec -n N python -m lab ARGS`` from the repo root (no launcher when n == 0)."""
    return python_m("lab", n, args, timeout, **extra)


def python_m(module: str, n: int, args: list[str], timeout: float, **extra: str):
    cmd = [sys.executable, "-m", module, *args]
    if n:
        cmd = [mpiexec(), "-n", str(n), *cmd]
    return run(cmd, timeout, **extra)


def start_gossipgrad(n: int, args: list[str], **extra: str) -> subprocess.Popen:
    """Start ``mpiexec -n N python -m gossipgrad ARGS`` without waiting (see ``finish``)."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "gossipgrad", *args]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(**extra),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


def finish(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Wait for ``proc``; past ``timeout`` kill it and fail with its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(
            f"{proc.args} did not finish within {timeout} s:\n{out}\n{err}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def stopped_rank_bound_s(timeout: float) -> float:
    """Seconds from a rank's stop to the job's end that docs/guarantees.md promises (row 2):
    the deadline (with 10 % for its polling), the stop-agreement grace, the probe window,
    the reporter's grace and 5 s for a loaded host."""
    return 1.1 * timeout + 20


def signal_rank_in_training(
    tmp_path,
    sig: int,
    timeout: int,
    train_args: list[str] = (),
    launcher_flags: list[str] = (),
    wait_s: float | None = None,
):
    """Start a long 4-rank ``train`` (deadline ``--comm-timeout TIMEOUT``), send ``sig`` to
    rank 2 once its first metrics line is written, and wait ``wait_s`` for the job to end
    (default: the documented bound, ``stopped_rank_bound_s``, + 10 s, so that a job that ends
    late is measured and reported by the caller's bound check rather than cut off below the
    bound). Returns (returncode, stdout + stderr, seconds from the signal to the end); the job
    is killed if it outlives the wait (the test then fails)."""
    metrics = tmp_path / "m.jsonl"
    cmd = [
        mpiexec(),
        *launcher_flags,
        "-n",
        "4",
        sys.executable,
        "-m",
        "gossipgrad",
        "train",
        *train_args,
        "--no-progress",
        "--epochs",
        "1000",
        "--comm-timeout",
        str(timeout),
        "--metrics-out",
        str(metrics),
        "--print-freq",
        "1",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (metrics.exists() and metrics.stat().st_size > 0):
            assert time.monotonic() < deadline, "training never started"
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        os.kill(rank_pid(proc.pid, rank=2), sig)
        signalled = time.monotonic()
        wait = stopped_rank_bound_s(timeout) + 10 if wait_s is None else wait_s
        out, err = proc.communicate(timeout=wait)
        return proc.returncode, out + err, time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


def _load_procs():
    spec = importlib.util.spec_from_file_location(
        "procs", os.path.join(REPO, "scripts", "procs.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


rank_pids = _load_procs().rank_pids
"""``{rank: pid}`` of the MPI ranks below process ``root`` (scripts/procs.py)."""


def rank_pid(root: int, rank: int) -> int:
    """The pid of MPI rank ``rank`` under the launcher process ``root``."""
    pids = rank_pids(root)
    if rank not in pids:
        raise AssertionError(f"rank {rank} not found under pid {root} (found {sorted(pids)})")
    return pids[rank]


def mpmd(parts: list[tuple[list[str], dict[str, str]]], timeout: float) -> tuple:
    """``mpiexec -n 1 [-env K V ...] python -m gossipgrad ARGS : ...``, one rank per part
    (ranks started with different flags or environments). Returns (CompletedProcess,
    seconds)."""
    cmd = [mpiexec()]
    for i, (args, variables) in enumerate(parts):
        extra = [x for k, v in variables.items() for x in ("-env", k, v)]
        cmd += [":"] * bool(i) + ["-n", "1", *extra, sys.executable, "-m", "gossipgrad", *args]
    t0 = time.monotonic()
    out = run(cmd, timeout)
    return out, time.monotonic() - t0


def start_up_seconds(n: int = 2) -> float:
    """What starting ``n`` ranks that import gossipgrad's command line and initialise MPI
    takes right now (the floor under any launch's wall time on this machine, loaded or not)."""
    code = "import gossipgrad.cli, gossipgrad.comm.mpi"
    t0 = time.monotonic()
    out = run([mpiexec(), "-n", str(n), sys.executable, "-c", code], timeout=240)
    assert out.returncode == 0, out.stderr
    return time.monotonic() - t0


class cpu_load:
    """``with cpu_load():`` keeps every core busy with spinning processes (niced like the
    job), so that timing-dependent bounds are checked under load, not on a quiet machine."""

    def __init__(self, processes: int | None = None) -> None:
        self.n = processes or os.cpu_count() or 2
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> cpu_load:
        spin = "import time\nwhile True: time.perf_counter()"
        self.procs = [
            subprocess.Popen([sys.executable, "-c", spin], stdin=subprocess.DEVNULL)
            for _ in range(self.n)
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.kill()
            p.wait()


def error_lines(text: str) -> list[str]:
    """The lines of ``text`` that report an error (gossipgrad's ERROR records, click's
    ``Error:`` lines), without MPICH's own ``Abort(...)`` line."""
    return [ln for ln in text.splitlines() if " ERROR " in ln or ln.startswith(("Error", "rank"))]
