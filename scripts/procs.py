"""The MPI ranks below a launcher process, found from ``/proc`` (Linux only, stdlib only).

Used by ``lab/studies/soak.py`` (memory of each rank over a long run) and the tests that stop or
kill one rank of a real ``mpiexec`` job (``tests/support/launch.py``).
"""

from __future__ import annotations

import os

RANK_VARIABLES = (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK")  # MPICH/Hydra, Open MPI


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we read it
            children.setdefault(ppid, []).append(int(entry))
    return children


def rank_pids(root: int) -> dict[int, int]:
    """``{rank: pid}`` of the MPI ranks (processes with ``PMI_RANK`` or Open MPI's
    ``OMPI_COMM_WORLD_RANK`` in their environment) below process ``root``."""
    children = _children()
    ranks: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        except OSError:
            continue
        key = next((k for k in RANK_VARIABLES if k in env), None)
        if key is not None and pid != root:
            ranks.setdefault(int(env[key]), pid)  # the rank, not its DataLoader workers
    return ranks
