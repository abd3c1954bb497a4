"""The run directory belongs to one job: a lock, and the checks that can be made before the
first step instead of at the first checkpoint.

    lock = RunDirLock.acquire(run_dir)     # rank 0; ValueError names the job holding it
    preflight(run_dir, resume, evaluate)   # rank 0: writable, not another run's checkpoints

The lock is ``RUN_DIR/.gossipgrad.lock``, held with ``flock`` for the life of the job and
holding its owner (host, pid, launcher job id, start time). The kernel releases it when the
owner ends however it ends (SIGKILL included), so a lock left by a dead job is stale by
construction: the next job takes it over and says whose it was. Where the file system has
no ``flock`` (some network file systems), a lock file whose owner is a dead process on this
host is taken over; one owned from another host is refused (delete it if that job is gone).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import socket
import time
from typing import Any

log = logging.getLogger(__name__)

LOCK_NAME = ".gossipgrad.lock"
_MAIN = re.compile(r"^ckpt-(\d+)\.pt$")


def _owner() -> dict[str, Any]:
    job = next(
        (os.environ[v] for v in ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID") if v in os.environ),
        None,
    )
    return {"host": socket.gethostname(), "pid": os.getpid(), "job": job, "since": time.time()}


def describe(owner: dict[str, Any]) -> str:
    if not owner.get("pid"):
        return "its owner left no name in the lock file"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(owner.get("since", 0)))
    job = f", job {owner['job']}" if owner.get("job") else ""
    return f"pid {owner.get('pid')} on host {owner.get('host')}{job}, since {when}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunDirLock:
    """This job's hold on a run directory (see the module docstring). ``release()`` lets go
    (the process's end does too)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd, self.path = fd, path

    @classmethod
    def acquire(cls, run_dir: str) -> RunDirLock:
        """Take the lock (creating ``run_dir``) or raise ValueError naming who holds it."""
        path = os.path.join(run_dir, LOCK_NAME)
        try:
            os.makedirs(run_dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ValueError(f"--run-dir {run_dir}: cannot write there: {_why(exc)}") from None
        try:
            previous = _read(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _in_use(run_dir, _read(fd) or previous) from None
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                _without_flock(run_dir, previous)
            if _alive_here(previous):
                # flock granted, yet its owner runs on this host: a file system whose locks
                # do not reach every process (a network or overlay mount): it is in use
                raise _in_use(run_dir, previous, os.path.join(run_dir, LOCK_NAME))
            if previous.get("pid") and previous.get("pid") != os.getpid():
                log.info(
                    "--run-dir %s: took over the lock of a job that ended (%s)",
                    run_dir,
                    describe(previous),
                )
            _write(fd, _owner())
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _read(fd: int) -> dict[str, Any]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 4096) or b"{}")
    except (OSError, ValueError):
        return {}


def _write(fd: int, owner: dict[str, Any]) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(owner).encode(), 0)
    os.fsync(fd)


def _in_use(run_dir: str, holder: dict[str, Any], lock_file: str = "") -> ValueError:
    """The refusal of a run directory that another job is using."""
    stale = f" (if that job has ended, delete {lock_file})" if lock_file else ""
    return ValueError(
        f"--run-dir {run_dir} is in use by another job ({describe(holder)}){stale}: two "
        "jobs in one run directory delete each other's checkpoints; wait for it to end, or "
        "use another --run-dir"
    )


def _alive_here(owner: dict[str, Any]) -> bool:
    """Whether ``owner`` (a lock file's) is another process, alive, on this host."""
    pid = owner.get("pid")
    here = owner.get("host") == socket.gethostname()
    return bool(pid) and pid != os.getpid() and here and _alive(int(pid))


def _without_flock(run_dir: str, previous: dict[str, Any]) -> None:
    """No ``flock`` here: refuse a lock whose owner may still run (on this host: alive; on
    another: who knows)."""
    if not previous.get("pid"):
        return
    here = previous.get("host") == socket.gethostname()
    if here and not _alive_here(previous):
        return
    raise _in_use(run_dir, previous, os.path.join(run_dir, LOCK_NAME))


def preflight(run_dir: str, resume: str | None, evaluate: bool) -> None:
    """Rank 0, before the first step: ValueError unless ``run_dir`` can be created and
    written (a probe file is written, fsynced and removed), and, for a fresh run (no
    ``--resume``), unless it holds no checkpoint of an earlier run (a fresh run there would
    prune that run's checkpoints, or its own, and ``--resume auto`` would later continue the
    wrong one)."""
    try:
        os.makedirs(run_dir, exist_ok=True)
        probe = os.path.join(run_dir, f".gossipgrad.probe.{os.getpid()}")
        with open(probe, "wb") as f:
            f.write(b"gossipgrad write probe\n")
            f.flush()
            os.fsync(f.fileno())
        os.remove(probe)
    except OSError as exc:
        raise ValueError(f"--run-dir {run_dir}: cannot write there: {_why(exc)}") from None
    if resume or evaluate:
        return
    steps = sorted(int(m.group(1)) for e in os.listdir(run_dir) if (m := _MAIN.match(e)))
    if steps:
        raise ValueError(
            f"--run-dir {run_dir} holds checkpoints of an earlier run (steps "
            f"{', '.join(map(str, steps))}): pass --resume auto to continue it, or use "
            "another --run-dir (a fresh run would prune them)"
        )


def check_writable(path: str, flag: str) -> None:
    """ValueError naming ``flag`` unless ``path`` can be opened for appending (its
    directory is created)."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write it: {_why(exc)}") from None


def _why(exc: OSError) -> str:
    """An OSError's cause in words (``makedirs`` of a path through a file says "File
    exists")."""
    if isinstance(exc, FileExistsError):
        return "a part of the path is a file, not a directory"
    return exc.strerror or str(exc)
