"""Start-up under a launcher: every rank meets the others, or all of them end together.

What MPICH's launcher (Hydra, the ``mpich`` wheel) does, measured (docs/guarantees.md):
``MPI_Init`` returns on no rank until every rank has called it; a rank that ends *before*
``MPI_Init`` is not noticed, so the others wait in ``MPI_Init`` forever; a rank that ends
after it without ``MPI_Finalize`` gets every other rank SIGKILLed; ``MPI_Abort`` ends the job
with its code; a clean exit on some ranks only leaves them waiting in ``MPI_Finalize``. So:

- a rank that fails before MPI starts (a bad flag, a config file, a junk ``GOSSIPGRAD_*``
  variable) starts MPI anyway and joins the first collective, the start-up agreement
  (:func:`gossipgrad.engine.agreement.check_start`), with its error; every rank learns it
  there, rank 0 prints each distinct error once with the ranks that hit it, and all exit
  with its status (2 for a usage error), so every rank reaches ``MPI_Finalize``;
- ``MPI_Init`` runs under a deadline (:class:`InitWatchdog`): a rank that never starts MPI
  (not gossipgrad at all, killed, a node without the package) ends the others within
  ``max(--comm-timeout, START_TIMEOUT_S)`` (60 s, or ``GOSSIPGRAD_START_TIMEOUT_S``) with a
  message saying so;
- Ctrl-C (SIGINT, which mpiexec forwards to every rank) ends the job at once with status
  130 and one line (:func:`interrupts_end_the_job`), instead of a KeyboardInterrupt that
  leaves other ranks waiting for their deadline.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any, NoReturn

from gossipgrad.engine.agreement import AgreedError, check_start

#: Variables that launchers set for each rank they start.
LAUNCHER_VARS = (
    "PMI_RANK",
    "PMI_FD",
    "PMI_PORT",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_RANK",
    "MPI_LOCALRANKID",
    "HYDI_CONTROL_FD",
)

START_TIMEOUT_S = 60.0
"""The shortest deadline of the start-up steps (MPI_Init, the start-up agreements), whatever
``--comm-timeout`` says: ranks reach them at different times (imports, data scans).
``GOSSIPGRAD_START_TIMEOUT_S`` replaces it (:func:`start_timeout_s`)."""

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as a shell reports it."""

_world: Any = None  # this process's MPI world once the start-up agreement passed
_joined: Any = None  # a replacement's communicator with the survivors (--on-failure respawn)


def under_launcher() -> bool:
    """Whether a launcher started this process (``GOSSIPGRAD_MPI=1``/``0`` decides when it
    is valid). Reads the environment directly: a junk ``GOSSIPGRAD_*`` variable must not stop
    the rank from meeting the others to report it."""
    forced = os.environ.get("GOSSIPGRAD_MPI", "").strip().lower()
    if forced in {"1", "true", "yes", "on"}:
        return True
    if forced in {"0", "false", "no", "off"}:
        return False
    return any(v in os.environ for v in LAUNCHER_VARS)


def start_timeout_s() -> float:
    """The start-up steps' shortest deadline: ``GOSSIPGRAD_START_TIMEOUT_S`` (tests wait a
    few seconds, not a minute), else :data:`START_TIMEOUT_S`. Read from the environment
    directly, as :func:`under_launcher` is: a junk value keeps the default here, so the rank
    still meets the others, and the settings' check reports it there."""
    try:
        value = float(os.environ.get("GOSSIPGRAD_START_TIMEOUT_S", "").strip())
    except ValueError:
        return START_TIMEOUT_S
    return value if 0 < value < float("inf") else START_TIMEOUT_S


def _rank_hint() -> str:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            return os.environ[var]
    return "?"


class InitWatchdog:
    """A deadline for ``MPI_Init``, which holds the GIL while it waits (no Python thread can
    time it out): a forked child that, unless told within ``timeout`` seconds that MPI has
    started, writes ``message`` to stderr and SIGKILLs this process. The child only waits on
    a pipe; it touches nothing of MPI (not yet initialised when it is forked)."""

    def __init__(self, timeout: float, message: str) -> None:
        self.pid = 0
        read, self._write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: os calls only, then _exit
            try:
                os.close(self._write)
                ready, _, _ = select.select([read], [], [], timeout)
                if not ready:
                    os.write(2, message.encode() + b"\n")
                    os.kill(os.getppid(), signal.SIGKILL)
            finally:
                os._exit(0)
        os.close(read)
        self.pid = pid

    def done(self) -> None:
        os.close(self._write)  # the child sees end-of-file and exits
        os.waitpid(self.pid, 0)

    def __enter__(self) -> InitWatchdog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


def start_mpi(
    timeout: float, error: str | None = None, usage: str = "", code: int = 2, **kw: Any
) -> Any:
    """Initialise MPI (under :class:`InitWatchdog`) and run the start-up agreement; return
    the world's ``MpiCommunicator``. With ``error`` (this rank could not start), or when
    another rank could not: rank 0 prints each error once, every rank exits with the
    largest status (``SystemExit``, so every rank reaches ``MPI_Finalize``). ``kw`` go to
    ``MpiCommunicator``."""
    global _world
    deadline = max(timeout, start_timeout_s())
    note = (
        f"rank {_rank_hint()}: MPI did not start within {deadline:g} s: a rank of this job "
        "ended before starting MPI or never started (its error is above, if it printed "
        "one); ending this rank"
    )
    if "mpi4py.MPI" in sys.modules:  # MPI runs already (a library caller): no fork after it
        from gossipgrad.comm.mpi import MpiCommunicator
    else:
        with InitWatchdog(deadline, note):
            from gossipgrad.comm.mpi import MpiCommunicator  # initialises MPI

    if error is not None:
        kw.setdefault("delay_s", 0.0)  # the variables may be what is wrong: read none
    from gossipgrad.inject.delay import DelayedPoster  # latency injection, when asked for

    comm = MpiCommunicator(timeout=timeout, delayer=DelayedPoster, **kw)
    try:
        check_start(comm, error, code, deadline)
    except AgreedError as exc:
        if comm.rank == exc.reporter:
            if error is not None and usage:
                sys.stderr.write(usage)
            sys.stderr.write(f"{exc}\n")
            sys.stderr.flush()
        raise SystemExit(exc.code) from None
    _world = comm
    if error is None:  # a replacement merges with the survivors at once: they wait for it
        from gossipgrad.comm.mpi import join_parent

        global _joined
        _joined = join_parent(deadline, delay_s=0.0)
    return comm


def started() -> Any:
    """This process's MPI world once the start-up agreement passed, else None."""
    return _world


def joined() -> Any:
    """In a replacement that survivors spawned (``--on-failure respawn``), the job's
    communicator it joined them on (``welcome``: their header); else None."""
    return _joined


def fail(text: str, usage: str = "", code: int = 2) -> NoReturn:
    """End this rank after an error outside any training body: before MPI started, through
    the start-up agreement (the other ranks end with it); after, by aborting the job (the
    other ranks cannot know to stop)."""
    world = started()
    if world is None:
        if not under_launcher():
            sys.stderr.write(usage + text + "\n")
            raise SystemExit(code)
        start_mpi(start_timeout_s(), error=text, usage=usage, code=code)
        raise SystemExit(code)  # not reached: start_mpi exits when a rank failed
    sys.stderr.write(f"rank {world.rank}: {text}\n")
    sys.stderr.flush()
    time.sleep(1.0)  # the launcher forwards output through pipes: let the line out
    world.abort(code)
    raise SystemExit(code)


def click_text(exc: Any) -> tuple[str, str]:
    """(``Error: ...`` line, the usage lines before it) of a click exception."""
    buf = io.StringIO()
    exc.show(file=buf)
    text = buf.getvalue().rstrip("\n")
    head, sep, tail = text.rpartition("Error: ")
    return (sep + tail, head) if sep else (text, "")


@contextlib.contextmanager
def interrupts_end_the_job(comm: Any) -> Iterator[None]:
    """While inside, SIGINT ends the whole job at once with status 130 and one line (rank 0
    reports; a rank interrupted alone reports after a moment, if the launcher has not ended
    it by then), instead of a KeyboardInterrupt on each rank somewhere in a wait. The
    previous handler comes back on leaving (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(_signum: int, _frame: Any) -> None:
        if comm.rank != 0:
            time.sleep(2.0)  # under Ctrl-C every rank gets it: rank 0's line (and abort) is enough
        sys.stderr.write(f"[r{comm.rank}/{comm.size}] interrupted (SIGINT): ending the job\n")
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        if comm.size > 1:
            time.sleep(1.0)  # as in fail(): let the launcher forward the line before Abort
            comm.abort(INTERRUPTED)
        os._exit(INTERRUPTED)

    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
