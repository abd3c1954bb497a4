"""Reading a sample has a deadline: a file that blocks (a stalled network file system, a FIFO)
ends the job naming the file and the rank stuck on it, instead of hanging that rank (it then
ignores SIGTERM) until a peer's deadline blames someone else.

    reader = DeadlineReader(timeout=60.0)
    image = reader.call(load, path)     # Stalled after 60 s: "reading PATH did not finish ..."

The call runs on a daemon helper thread and the caller waits for it with the deadline. A
read that passes it is abandoned (its thread stays blocked in the kernel; it is a daemon, so
it does not keep the process alive) and the next read gets a new thread. Works the same in
the training process and in forked DataLoader workers (a thread per process, made on first
use). Costs a hand-off between two threads per sample (tens of microseconds).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import Any


class Stalled(OSError):
    """A read passed its deadline; the message names the path."""


class DeadlineReader:
    """Runs ``fn(path)`` with a deadline of ``timeout`` seconds (None: no helper thread,
    no deadline)."""

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout
        self._jobs: queue.SimpleQueue | None = None
        self._pid = -1

    def __getstate__(self) -> dict[str, Any]:  # no queue crosses a process boundary
        return {"timeout": self.timeout, "_jobs": None, "_pid": -1}

    def _worker(self) -> queue.SimpleQueue:
        if self._jobs is None or self._pid != os.getpid():
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(
                target=_serve, args=(jobs,), name="gossipgrad-read", daemon=True
            ).start()
            self._jobs, self._pid = jobs, os.getpid()
        return self._jobs

    def call(self, fn: Callable[[str], Any], path: str) -> Any:
        """``fn(path)``'s result or exception; :class:`Stalled` past the deadline."""
        if self.timeout is None:
            return fn(path)
        box: dict[str, Any] = {}
        done = threading.Event()
        self._worker().put((fn, path, box, done))
        if not done.wait(self.timeout):
            self._jobs = None  # that thread is stuck: the next read gets a fresh one
            raise Stalled(
                f"reading {path} did not finish within {self.timeout:g} s (a stalled file "
                "system, or a file that blocks such as a FIFO?)"
            )
        if "error" in box:
            raise box["error"]
        return box["value"]


def _serve(jobs: queue.SimpleQueue) -> None:
    while True:
        fn, path, box, done = jobs.get()
        try:
            box["value"] = fn(path)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        done.set()
