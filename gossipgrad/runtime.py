"""Start-up: pick the transport from the launcher, set up per-rank logging and aborts.

Under ``mpiexec``/``mpirun``/``srun`` the world is MPI; run plainly, it is a single rank that
needs no launcher and no MPI at all.
"""

# Over 300 lines on purpose: start-up, per-rank logging and the abort path are one sequence a
# failure must follow end to end.

from __future__ import annotations

import logging
import math
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import numpy as np

from gossipgrad.choices import cli_spelling
from gossipgrad.comm.base import CommError, CommTimeout, Communicator, WaitPolicy, cause_of
from gossipgrad.comm.collectives import allreduce_, report
from gossipgrad.comm.hosts import host_id
from gossipgrad.options import DEFAULT_TIMEOUT_S
from gossipgrad.settings import Settings, settings
from gossipgrad.startup import LAUNCHER_VARS

log = logging.getLogger("gossipgrad")
T = TypeVar("T")

#: Seconds between reporting a fatal error and aborting the job (see ``abort_job``).
ABORT_GRACE_S = 1.0

#: Extra seconds a rank that leaves the report to another waits before reporting itself.
QUIET_S = 5.0

#: How long the training thread spins in a wait while every rank has a core of its own.
WAIT_SPIN_S = 1.0


def launched_by_mpi(env: Settings | None = None) -> bool:
    """True when a launcher started this process, or ``GOSSIPGRAD_MPI=1`` forces MPI."""
    forced = (env or settings()).force_mpi
    if forced is not None:
        return forced
    return any(v in os.environ for v in LAUNCHER_VARS)


_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")


def launch_rank(environ: Any = None) -> int:
    """This process's rank as its launcher says, before MPI starts (0 without one; srun's
    ``SLURM_PROCID`` counts only inside a job step).

        >>> launch_rank({"PMI_RANK": "3"}), launch_rank({}), launch_rank({"SLURM_PROCID": "2"})
        (3, 0, 0)
    """
    env = os.environ if environ is None else environ
    names = (*_RANK_VARS, "SLURM_PROCID") if "SLURM_STEP_ID" in env else _RANK_VARS
    for name in names:
        value = env.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def init(
    timeout: float = DEFAULT_TIMEOUT_S,
    verbose: bool = False,
    torch_distributed: bool = False,
    configure: bool = False,
) -> Communicator:
    """Return this process's communicator, with its waits fitted to its share of the node
    (:func:`wait_policy`).

    ``configure``: also fit the process as ``gossipgrad train`` does: torch's intra-op
    threads to this rank's share of the node's cores (:func:`torch_threads`;
    ``GOSSIPGRAD_THREADS``/``OMP_NUM_THREADS`` override) and gossipgrad's log to stderr with
    a rank prefix, rank 0 at INFO and the others at WARNING (:func:`setup_logging`). Off by
    default: a library leaves torch's threads and the application's logging as they are.
    ``verbose``: gossipgrad's log at DEBUG on every rank, with the prefix (it configures
    logging, with or without ``configure``).

    ``torch_distributed``: also bring up torch.distributed's default process group (gloo)
    on the same ranks, and set ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
    ``LOCAL_WORLD_SIZE`` as ``torchrun`` does (unless already set), so that a DDP
    script's ``DistributedSampler()``, ``dist.all_reduce`` of metrics and
    ``dist.barrier()`` work unchanged under ``mpiexec`` (:func:`start_torch_distributed`).

    Under a launcher, MPI starts with a deadline and the start-up agreement
    (:func:`gossipgrad.startup.start_mpi`: a rank that failed before MPI ends every rank),
    and any error after that ends the whole job (:func:`abort_job`)."""
    if not (timeout > 0 and math.isfinite(timeout)):
        name = "--comm-timeout" if cli_spelling() else "timeout"
        raise ValueError(f"{name} must be a finite number > 0 seconds, got {timeout}")
    env, cores = settings(), usable_cores()
    if launched_by_mpi(env):
        from gossipgrad import startup  # lazy: it initialises MPI, a one-rank run must not

        world = startup.started() or startup.start_mpi(timeout)
        try:
            comm, per_node, together, multiple = _mpi_world(timeout, env)
        except Exception:  # noqa: BLE001 - after MPI_Init: end every rank, not this one
            end_job(world)
    else:
        from gossipgrad.comm.local import LocalWorld

        per_node, together, multiple = 1, cores, True
        comm = LocalWorld(1, timeout=timeout).communicators()[0]
    if configure or verbose:
        setup_logging(comm.rank, comm.size, verbose)
    if configure:
        import torch

        torch.set_num_threads(torch_threads(cores, per_node, env))
    if comm.rank == 0:  # once per job, not once per rank
        _note_start(comm, multiple, per_node, together, env)
    if torch_distributed:
        start_torch_distributed(comm)
    return comm


def start_torch_distributed(comm: Communicator) -> None:
    """torch.distributed's default group (gloo) on ``comm``'s ranks, through the ddp
    strategy's rendezvous (rank 0's address broadcast as raw bytes), and torchrun's
    environment variables. Collective."""
    from gossipgrad.strategies.ddp import init_process_group

    init_process_group(comm, "gloo")
    on_node = _ranks_on_node(comm)
    for name, value in (
        ("RANK", comm.rank),
        ("WORLD_SIZE", comm.size),
        ("LOCAL_RANK", local_rank(comm)),
        ("LOCAL_WORLD_SIZE", on_node),
    ):
        os.environ.setdefault(name, str(value))


def _note_start(
    comm: Communicator, multiple: bool, per_node: int, together: int, env: Settings
) -> None:
    """Rank 0 says how MPI calls and waits will behave where that is not the usual."""
    if not multiple:
        log.warning(
            "MPI granted less than MPI_THREAD_MULTIPLE: MPI calls from the "
            "communication and shuffle threads are serialised behind one lock"
        )
    if comm.policy.spin_s == 0.0 and env.wait_spin_s is None:
        log.info(
            "%d ranks share %d cores: waits yield the CPU instead of spinning "
            "(GOSSIPGRAD_WAIT_SPIN_S overrides)",
            per_node,
            together,
        )


def _mpi_world(timeout: float, env: Settings) -> tuple[Communicator, int, int, bool]:
    """(the world fitted to the node, ranks on this node, cores they share, whether MPI
    granted ``MPI_THREAD_MULTIPLE``). Collective."""
    from gossipgrad import startup
    from gossipgrad.comm.mpi import MpiCommunicator, node_size, thread_multiple
    from gossipgrad.inject.delay import DelayedPoster

    per_node = node_size()
    # Ranks bound one per core each see one core: the node's are their union. Ranks get here
    # at different times (imports): the start-up deadline, not a tiny --comm-timeout.
    start = max(timeout, startup.start_timeout_s())
    together = node_cores(MpiCommunicator(timeout=start, delay_s=0.0))
    joined = startup.joined()  # a replacement: the training ranks cannot count with it
    if joined is not None:  # now; assume they all share its node (no spinning waits)
        per_node = joined.size
    comm = MpiCommunicator(
        joined.mpi4py_comm if joined is not None else None,
        timeout=timeout,
        policy=wait_policy(together, per_node, env),
        delayer=DelayedPoster,
    )
    if joined is not None:
        comm.welcome, comm.joined_at = joined.welcome, joined.joined_at
    return comm, per_node, together, thread_multiple()


def torch_threads(cores: int, per_node: int, env: Settings) -> int:
    """torch's intra-op threads per rank: ``GOSSIPGRAD_THREADS`` or ``OMP_NUM_THREADS`` when
    set, else cores // ranks on this node, at least 1 (oversubscribed threads make every
    rank slow)."""
    wanted = env.threads or env.omp_threads
    return max(1, wanted) if wanted else max(1, cores // per_node)


def wait_policy(cores: int, per_node: int, env: Settings) -> WaitPolicy:
    """How this rank's waits poll. The training thread spins in a wait (as ``MPI_Wait``
    does) only while every rank on the node has a core of its own; with more ranks than
    cores a spinning rank steals the core of the rank it waits for, so waits back off at
    once. ``GOSSIPGRAD_WAIT_SPIN_S``, ``_PROGRESS_BURST`` and ``_POLL_MAX_PAUSE_S`` override.

        >>> wait_policy(2, 4, Settings()).spin_s, wait_policy(8, 4, Settings()).spin_s
        (0.0, 1.0)
    """
    spin = env.wait_spin_s
    if spin is None:
        spin = WAIT_SPIN_S if per_node <= cores else 0.0
    return WaitPolicy(
        spin_s=spin,
        burst=env.progress_burst,
        max_pause_s=env.poll_max_pause_s,
        block=env.comm_block,
    )


def host_share(comm: Communicator) -> tuple[int, int]:
    """(cores the ranks of ``comm`` on this node may run on together, ranks on this node):
    what the planner needs to know whether a communication thread has a core of its own.
    Unbound ranks all see the node's cores; ranks bound one per core (``mpiexec -bind-to
    core``) see one each, and the node has as many as their union. Collective."""
    return node_cores(comm), _ranks_on_node(comm)


def node_cores(comm: Communicator) -> int:
    """The union of the affinity sets (``os.sched_getaffinity``) of the ranks of ``comm``
    on this rank's host, found by one allreduce of raw int64s (host id, one flag per CPU).
    Collective; 1 rank: :func:`usable_cores`."""
    if comm.size == 1:
        return usable_cores()
    cpus = _affinity()
    table = np.zeros((comm.size, 1 + max(max(cpus) + 1, os.cpu_count() or 1)), np.int64)
    table[comm.rank, 0] = host_id()
    table[comm.rank, 1 + np.array(sorted(cpus))] = 1
    allreduce_(comm, table)
    mine = table[:, 0] == table[comm.rank, 0]
    return int((table[mine, 1:].sum(axis=0) > 0).sum()) or 1


def usable_cores() -> int:
    return len(_affinity()) or 1


def _affinity() -> set[int]:
    """The CPUs this process may run on (all of them where the OS does not tell)."""
    try:
        return set(os.sched_getaffinity(0)) or {0}
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def _ranks_on_node(comm: Communicator) -> int:
    if comm.size == 1 or not launched_by_mpi():
        return 1
    from gossipgrad.comm.mpi import node_size  # lazy: only under a launcher

    return node_size(getattr(comm, "mpi4py_comm", None))


class _RankFormatter(logging.Formatter):
    def __init__(self, rank: int, size: int) -> None:
        super().__init__(f"[r{rank}/{size}] %(levelname)s %(name)s: %(message)s")


def setup_logging(rank: int, size: int, verbose: bool = False) -> None:
    """Rank 0 logs at INFO, the others at WARNING (DEBUG/INFO everywhere with ``verbose``)."""
    root = logging.getLogger("gossipgrad")
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RankFormatter(rank, size))
    root.addHandler(handler)
    root.propagate = False
    if verbose:
        root.setLevel(logging.DEBUG)
    else:
        root.setLevel(logging.INFO if rank == 0 else logging.WARNING)


def abort_job(comm: Communicator, message: str, code: int = 1, quiet: bool = False) -> NoReturn:
    """Report ``message`` from this rank and end the whole job with a non-zero code.

    ``quiet``: another rank reports this error (the ranks agreed on it, or a deadline's probe
    chose the lowest rank heard): wait :data:`QUIET_S` longer for that rank to end the job,
    and only then report and abort here (if that rank could not)."""
    if quiet and comm.size > 1:
        time.sleep(ABORT_GRACE_S + QUIET_S)
    log.error(message)
    sys.stdout.flush()
    sys.stderr.flush()
    if comm.size > 1:
        # The launcher forwards output through pipes; Abort kills them at once, and a
        # message still in a pipe was seen lost under load (Hydra). Give it a moment.
        time.sleep(ABORT_GRACE_S)
        comm.abort(code)
    raise SystemExit(code)


def rank_message(comm: Communicator, exc: BaseException) -> str:
    """``exc``'s message, prefixed with this rank unless it already names it."""
    message = str(exc)
    return message if message.startswith(f"rank {comm.rank}") else f"rank {comm.rank}: {message}"


def call_or_abort(comm: Communicator, body: Callable[[Communicator], T]) -> T:
    """``body(comm)``; if it raises on this rank, report it and end every rank of the job
    (``abort_job``), so that ranks waiting for this one in a collective do not hang. A
    ``ValueError`` on a single rank is re-raised (the caller decides: a usage error, or
    ``abort_job``)."""
    try:
        return body(comm)
    except ValueError:
        if comm.size == 1:
            raise
        end_job(comm)
    except Exception:  # noqa: BLE001 - reported by end_job
        end_job(comm)


def end_job(comm: Communicator) -> NoReturn:
    """End every rank after the exception being handled on this one, reported once: an
    error every rank agreed on by its reporter, a deadline by the lowest rank its probe
    heard (naming the ranks that answered none), anything else by this rank."""
    exc = sys.exc_info()[1]
    reporter = getattr(exc, "reporter", None)  # an AgreedError, or an error made like one
    if reporter is not None:
        abort_job(comm, str(exc), getattr(exc, "code", 1), quiet=comm.rank != reporter)
    timeout = cause_of(exc, CommTimeout) or _library_deadline(comm, exc)
    if timeout is not None:  # who is stuck: probe the others, the lowest rank heard reports
        message, reporter = report(comm, timeout)
        abort_job(comm, message, quiet=comm.rank != reporter)
    if isinstance(exc, ValueError | CommError | RuntimeError | OSError):
        abort_job(comm, rank_message(comm, exc))
    log.exception("rank %d: unexpected error", comm.rank)  # a bug: say where
    abort_job(comm, f"rank {comm.rank}: aborting the job after an unexpected error")


def _library_deadline(comm: Communicator, exc: BaseException | None) -> CommTimeout | None:
    """A collective of torch.distributed that failed (``--strategy ddp``: gloo's "Timed out
    waiting 5000ms", a peer's closed connection) as a deadline of ours, so that the report
    probes the ranks and names the one that stopped; None for any other error. DDP's
    reducer raises gloo's failures as plain RuntimeErrors: they are known by their text."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    failed = cause_of(exc, getattr(dist, "DistError", ()))
    if failed is None and isinstance(exc, RuntimeError) and _LIBRARY_FAILURES.search(str(exc)):
        failed = exc
    if failed is None:
        return None
    said = " ".join(str(failed).split())  # gloo's message spans lines
    return CommTimeout(f"rank {comm.rank}: torch.distributed: {said}; is every rank alive?")


#: How torch.distributed's backends word a collective that a rank never joined.
_LIBRARY_FAILURES = re.compile(r"gloo/transport/|collective operation timeout|NCCL communicator")


def local_rank(comm: Communicator) -> int:
    """This rank's index among the ranks on its node (0 without MPI)."""
    if comm.size == 1 or not launched_by_mpi():
        return 0
    from gossipgrad.comm.mpi import node_local_rank

    return node_local_rank()


def select_device(choice: str, comm: Communicator) -> Any:
    """``cpu``, or ``cuda:{node-local rank mod GPUs}``; ``auto`` = cuda when available.

    One rank per GPU: with more ranks than GPUs on a node, ranks share GPUs (warned).
    A registered device (``--device NAME:ARG``, e.g. the stand-in) keeps the model where
    its spec says (cpu).
    """
    import torch

    from gossipgrad.registry import DEVICES

    if choice not in ("auto", "cpu", "cuda"):
        return torch.device(DEVICES.get(choice).torch_device)
    if choice == "cpu" or (choice == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ValueError(
            f"rank {comm.rank}: --device cuda, but torch sees no CUDA device "
            "(CUDA_VISIBLE_DEVICES, driver, or a CPU-only torch build?)"
        )
    lr, count = local_rank(comm), torch.cuda.device_count()
    if lr >= count:
        log.warning(
            "rank %d: node-local rank %d but only %d GPUs: sharing cuda:%d",
            comm.rank,
            lr,
            count,
            lr % count,
        )
    device = torch.device("cuda", lr % count)
    torch.cuda.set_device(device)
    return device


def make_stager(device: Any) -> Any:
    """How device tensors reach MPI: direct if the MPI library is CUDA-aware, else staged."""
    if getattr(device, "type", "cpu") != "cuda" or not launched_by_mpi():
        return None
    from gossipgrad.comm.mpi import cuda_aware
    from gossipgrad.comm.staging import Stager

    return Stager(cuda_aware())
