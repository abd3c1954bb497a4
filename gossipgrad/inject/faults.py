"""A rank that dies on demand, for failure tests: ``GOSSIPGRAD_INJECT_KILL=RANK:STEP[:WHERE]``.

Launch rank RANK kills itself (``comm.die()``: SIGKILL under MPI, as a crash or the OOM
killer would) at step STEP, at one of these points:

- ``step`` (default): before the step's forward pass;
- ``shuffle``: right after the step started a shuffle round (pick a STEP that is a multiple
  of ``--shuffle-every``), so the round is on the wire when the rank dies;
- ``eval``: in an evaluation at STEP, after the global average, before the scores are summed;
- ``checkpoint``: in the checkpoint of STEP, while writing this rank's file (rank 0's: the
  main file): it dies with half of the file written to its ``.tmp`` name.

- ``respawn``: in the first respawn resuming at step STEP or later (``--on-failure
  respawn``), on a survivor, once the replacements have joined and before they have their
  state.

Several kills are separated by commas (``2:40,5:200``). RANK is the rank at launch, also after
survivors were renumbered, and a replacement's (it takes the launch rank of the one it
replaces). Each kill happens once: a replacement that joins at step S skips the kills at
steps up to S, which the rank it replaces already met (``2:16,2:30`` kills launch rank 2
at step 16 and its replacement at step 30). Unset, nothing happens.

    faults = KillSwitch(comm.rank)          # at start-up: the launch rank
    faults.at("step", step, comm)           # in the loop
"""

from __future__ import annotations

import logging
import os
import time

from gossipgrad.comm.base import Communicator
from gossipgrad.settings import Settings, settings

log = logging.getLogger(__name__)


class KillSwitch:
    """The kills ``GOSSIPGRAD_INJECT_KILL`` names for launch rank ``launch_rank``."""

    def __init__(self, launch_rank: int, env: Settings | None = None, after: int = -1) -> None:
        kills = (env or settings()).inject_kill
        self.launch_rank = launch_rank
        self.points = {
            (step, where) for rank, step, where in kills if rank == launch_rank and step > after
        }

    def armed(self, where: str, step: int) -> bool:
        if where == "respawn":  # where a respawn resumes is the survivors' agreement
            return any(w == where and s <= step for s, w in self.points)
        return (step, where) in self.points

    def at(self, where: str, step: int, comm: Communicator) -> None:
        """Die here if a kill names this rank, ``step`` and ``where``; else return."""
        if not self.armed(where, step):
            return
        log.warning(
            "GOSSIPGRAD_INJECT_KILL: launch rank %d dies at step %d (%s), time %.3f",
            self.launch_rank,
            step,
            where,
            time.time(),
        )
        for h in logging.getLogger("gossipgrad").handlers:
            h.flush()
        comm.die()  # type: ignore[attr-defined]

    def tear(self, path: str, step: int, comm: Communicator) -> None:
        """Cut ``path`` (a checkpoint being written) to half its length, then die as
        :meth:`at` ``("checkpoint", step)`` does: a rank killed mid-write."""
        if self.armed("checkpoint", step):
            os.truncate(path, os.path.getsize(path) // 2)
        self.at("checkpoint", step, comm)
