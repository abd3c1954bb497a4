"""Ranks agree before they spend: one cheap collective compares what every rank must share.

    check_start(comm, error=None)          # the first collective: did every rank start?
    check_settings(comm, items, problem)   # before the model: flags, data, environment

Both are one all-gather of a few int64 per rank (raw buffers, no pickles) and give every rank
the same verdict: nothing (carry on), or :class:`AgreedError` with one message, the same on
every rank, that rank 0 reports (``reporter``). A rank that failed (a bad flag, a missing data
directory) takes part with its error instead of leaving: the others would wait for it forever
(MPICH's ``MPI_Init`` waits for every rank; a collective waits for every rank).

``items`` are ``(label, value)`` pairs in one order on every rank (the same code builds
them): each value travels as 8 bytes (an int as itself, a float's bits, anything else a
63-bit hash of its ``repr``), and a difference is named by its label with the value of every
side (a second all-gather of the first differing item's ``repr``, only then):

    --lr differs between ranks: 0.1 on ranks 0, 1, 3; 0.2 on rank 2 (start every rank with
    the same flags, GOSSIPGRAD_* variables and config file)
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from gossipgrad.comm.base import Communicator
from gossipgrad.comm.collectives import wait_collective

SLOTS = 128
"""int64 per rank in the settings comparison (an error flag, a hash of the labels, the items)."""

TEXT_BYTES = 480
"""Bytes of text each rank contributes when a difference or an error is reported."""


class AgreedError(ValueError):
    """An error every rank raises at the same point with the same message (the ranks agreed
    on it); only ``reporter`` (rank 0) reports it. ``code``: the exit status."""

    def __init__(self, message: str, reporter: int = 0, code: int = 1) -> None:
        super().__init__(message)
        self.reporter, self.code = reporter, code


def encode(value: Any) -> int:
    """``value`` as one int64: ints (and bools) themselves, floats their IEEE bits, anything
    else a 63-bit hash of its ``repr`` (equal values, equal codes).

        >>> encode(3), encode(True), encode(0.1) == encode(0.1), encode("a") == encode("b")
        (3, 1, True, False)
    """
    if isinstance(value, bool | int) and -(2**63) <= value < 2**63:
        return int(value)
    if isinstance(value, float):
        return struct.unpack("<q", struct.pack("<d", value))[0]
    digest = hashlib.sha256(repr(value).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 2`` / ``ranks 0, 1, 3``."""
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _gather(comm: Communicator, row: np.ndarray, what: str, timeout: float | None) -> np.ndarray:
    table = np.zeros((comm.size, row.size), dtype=row.dtype)
    wait_collective(comm, comm.iallgather(row, table), what, None, timeout)
    return table


def _texts(comm: Communicator, text: str, timeout: float | None) -> list[str]:
    raw = text.encode()[:TEXT_BYTES]
    row = np.zeros(TEXT_BYTES + 2, dtype=np.uint8)
    row[:2] = np.frombuffer(len(raw).to_bytes(2, "little"), dtype=np.uint8)
    row[2 : 2 + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    table = _gather(comm, row, "start-up agreement (texts)", timeout)
    out = []
    for r in range(comm.size):
        n = int.from_bytes(bytes(table[r, :2]), "little")
        out.append(bytes(table[r, 2 : 2 + n]).decode(errors="replace"))
    return out


def _errors_message(
    comm: Communicator, failed: np.ndarray, texts: list[str], hint: bool = True
) -> str:
    """One line per distinct error: its text and the ranks that hit it (``hint``: and that
    the others started fine, which means the ranks were started differently)."""
    groups: dict[str, list[int]] = {}
    for r in np.flatnonzero(failed):
        groups.setdefault(texts[r], []).append(int(r))
    fine = [r for r in range(comm.size) if not failed[r]]
    lines = []
    for text, ranks in groups.items():
        if len(ranks) == comm.size:
            lines.append(text)
        else:
            lines.append(f"{ranks_text(ranks)} of {comm.size}: {text}")
    if fine and hint:
        lines[-1] += (
            f" ({ranks_text(fine)} started without error: do the ranks get different flags, "
            "GOSSIPGRAD_* variables, config files or data?)"
        )
    return "\n".join(lines)


def check_start(
    comm: Communicator, error: str | None = None, code: int = 2, timeout: float | None = None
) -> None:
    """The first collective of a job: every rank says whether it could start (``error``:
    why not, a one-line message). Raises :class:`AgreedError` (exit status the largest
    ``code`` of a failed rank) on every rank if any rank failed, naming the ranks and each
    distinct error once; the deadline's timeout names the ranks that never arrived."""
    if comm.size == 1:
        if error is not None:
            raise AgreedError(error, 0, code)
        return
    row = np.array([error is not None, code if error is not None else 0], dtype=np.int64)
    table = _gather(comm, row, "start-up agreement", timeout)
    if not table[:, 0].any():
        return
    texts = _texts(comm, error or "", timeout)
    raise AgreedError(_errors_message(comm, table[:, 0], texts), 0, int(table[:, 1].max()))


def check_settings(
    comm: Communicator,
    items: Sequence[tuple[str, Any]],
    problem: str | None = None,
    timeout: float | None = None,
    code: int = 1,
    what: str = "start-up agreement (settings)",
) -> None:
    """Compare ``items`` across ranks, and whether any rank hit a ``problem`` (a one-line
    message: its data, its run directory ...). Raises :class:`AgreedError` on every rank,
    naming each problem with its ranks, or the first differing label with the value on each
    side (and the labels of any other difference)."""
    labels = [label for label, _ in items]
    assert len(items) <= SLOTS - 2, f"{len(items)} settings to compare; raise SLOTS"
    row = np.zeros(SLOTS, dtype=np.int64)  # one size on every rank, whatever its version
    row[:2] = problem is not None, encode(tuple(labels))
    row[2 : 2 + len(items)] = [encode(v) for _, v in items]
    if comm.size == 1:
        if problem is not None:
            raise AgreedError(problem, 0, code)
        return
    table = _gather(comm, row, what, timeout)
    failed = table[:, 0]
    if failed.any():
        texts = _texts(comm, problem or "", timeout)
        raise AgreedError(_errors_message(comm, failed, texts, hint=False), 0, code)
    if len(set(table[:, 1])) > 1:
        sides = _sides(table[:, 1])
        raise AgreedError(
            "the ranks run different versions of gossipgrad (different settings to compare): "
            + "; ".join(ranks_text(rs) for rs in sides)
            + "; install the same version on every node",
            0,
            code,
        )
    differ = [i for i in range(len(items)) if len(set(table[:, 2 + i])) > 1]
    if not differ:
        return
    first = differ[0]
    texts = _texts(comm, _show(items[first][1]), timeout)
    sides = _sides(table[:, 2 + first])
    shown = "; ".join(f"{texts[rs[0]]} on {ranks_text(rs)}" for rs in sides)
    others = [labels[i] for i in differ[1:]]
    also = f"; {', '.join(others)} differ{'s' if len(others) == 1 else ''} too" if others else ""
    raise AgreedError(
        f"{labels[first]} differs between ranks: {shown}{also} (start every rank with the "
        "same flags, GOSSIPGRAD_* variables and config file, and the same data)",
        0,
        code,
    )


def _sides(column: np.ndarray) -> list[list[int]]:
    """Ranks grouped by their value, the group holding rank 0 first."""
    groups: dict[int, list[int]] = {}
    for r, v in enumerate(column.tolist()):
        groups.setdefault(v, []).append(r)
    return list(groups.values())


def _show(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
