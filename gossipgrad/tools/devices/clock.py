"""The stand-in device's clock: one stream of operations that take time without computing.

:class:`DeviceClock` is what a patched model waits on: ``run(seconds)`` queues an operation
on the device and sleeps (``time.sleep``: the GIL and the CPU are given away, so the
communication thread runs meanwhile) until the device would have finished it.
:class:`VirtualClock` only adds the seconds up, so a profile's gradient-ready times can be
computed on the meta device without waiting.

A GPU runs asynchronously: the host launches kernels ahead of the device, so the Python
between two layers costs the step nothing while the device is busy. The stand-in runs each
operation synchronously, so it keeps two timelines:

- the **host** timeline advances only by the host's own work, the wall time between the
  return of one operation and the call of the next (a late wake-up from ``sleep`` is not
  host work);
- the **device** timeline: an operation starts when both the previous one has ended and
  the host has reached it, ``start = max(device_end, host)``, and the caller sleeps until
  its end.

So a stretch of operations takes max(device time, host time), as on a GPU that the host
keeps fed, and sleep overshoot does not accumulate (every target is absolute: a late
wake-up shortens the next sleep).

:meth:`DeviceClock.sync` is the host waiting for the device (``loss.item()``, a CUDA event
before a send): the patched model calls it at the start of every root forward and of every
optimizer step, where both timelines restart from the wall clock, so neither hidden host
work nor an uncompensated late wake-up is carried from one step into the next.

A host that **blocks on something outside the device** (the engine's forward pre-hook
waiting for a parameter bucket from the network) is not host work that the device's lead
can hide: on a GPU the host launches nothing until the wait ends, and that end is a
wall-clock event. The engine reports such waits with :func:`host_waited`; the clock that
last synced on this thread places the host no earlier than the end of each wait that
blocked (longer than :data:`BLOCKED_S`). Without this, an operation after the wait could
be placed before it ended, and a step that waits on the link would read short.
"""

from __future__ import annotations

import threading
import time

BLOCKED_S = 0.001
"""A reported wait shorter than this returned at once (what it waited for was there): it is
host work like any other, which the device's lead may hide."""

_thread = threading.local()


def host_waited(start: float, end: float) -> None:
    """This thread's host blocked from ``start`` to ``end`` (``time.perf_counter``) on
    something outside the device; a no-op unless a :class:`DeviceClock` synced on this
    thread (a stand-in model's forward or optimizer step)."""
    clock = getattr(_thread, "clock", None)
    if clock is not None:
        clock.waited(start, end)


class DeviceClock:
    """Operations on one stand-in device, back to back; thread-safe.

    ``busy_s`` is the device time run so far, ``ops`` the number of operations.
    """

    def __init__(self) -> None:
        self.busy_s = 0.0
        self.ops = 0
        now = time.perf_counter()
        self._end = now  # the device's last operation ends here
        self._host = now  # how far the host's own work has come
        self._returned = now  # when the last operation returned to the host
        self._waits: list[tuple[float, float]] = []  # blocking host waits since then
        self._lock = threading.Lock()

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def sync(self) -> None:
        """The host waits for the device to finish, and both timelines restart from the
        wall clock: a late wake-up before this point is not made good after it. From here
        on, :func:`host_waited` on the calling thread reports to this clock."""
        _thread.clock = self
        with self._lock:
            target = max(self._host, self._end)
        delay = target - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        with self._lock:
            now = time.perf_counter()
            self._host = self._end = self._returned = max(now, target)
            self._waits.clear()

    def waited(self, start: float, end: float) -> None:
        """The host blocked from ``start`` to ``end`` (see :func:`host_waited`)."""
        if end - start >= BLOCKED_S:
            with self._lock:
                self._waits.append((start, end))

    def _advance_host(self, now: float) -> None:
        """Move the host's timeline to where it calls the next operation at wall ``now``:
        by its own work since the last return, and to no earlier than the end of each
        blocking wait reported since (plus the work after it), which it consumes. Under
        the lock."""
        host, cursor = self._host, self._returned
        for start, end in self._waits:
            if end <= cursor:
                continue  # ended before the last operation returned: nothing to place
            host = max(host + max(0.0, start - cursor), end)
            cursor = end
        self._waits.clear()
        self._host = host + max(0.0, now - cursor)

    def run(self, seconds: float) -> None:
        """Queue ``seconds`` of device work and return when it is done."""
        if seconds <= 0:
            return
        with self._lock:
            now = time.perf_counter()
            self._advance_host(now)
            end = max(self._end, self._host) + seconds
            self._end = end
            self.busy_s += seconds
            self.ops += 1
        delay = end - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        with self._lock:
            self._returned = time.perf_counter()


class VirtualClock:
    """A clock that only the operations move: ``run`` adds, ``now`` reads; no waiting."""

    def __init__(self) -> None:
        self.t = 0.0
        self.busy_s = 0.0
        self.ops = 0

    def now(self) -> float:
        return self.t

    def sync(self) -> None:
        """Nothing to wait for: there is no host timeline."""

    def waited(self, start: float, end: float) -> None:
        """No host timeline to place."""

    def run(self, seconds: float) -> None:
        if seconds > 0:
            self.t += seconds
            self.busy_s += seconds
            self.ops += 1
