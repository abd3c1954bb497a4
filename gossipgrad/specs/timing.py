"""What a timing is (``TIMINGS.register(name, spec)``): when a bucket's exchange posted at a
step is mixed in, which steps send, and what it refuses. PURE.

``--timing NAME[:ARG]`` names one (``lockstep``, ``stale``, ``lag:S``, or a plugin's). The
spec parses its argument, checks it against the exchange options (a one-line ValueError
naming what to change), says what the shell must know of it (class attributes below) and
builds the runtime object, a :class:`gossipgrad.engine.bucket.timing.base.Timing`, from a
:class:`~gossipgrad.engine.bucket.timing.base.TimingContext`.

``--staleness`` and ``--max-lag`` are the older spellings: each timing says which values of
them it stands for (:meth:`TimingSpec.aliases`), so code and records that read those
fields keep their meaning.
"""

from __future__ import annotations

from typing import Any, ClassVar


class TimingSpec:
    """One ``--timing``.

    Class attributes:
        name: the ``--timing`` value before the colon.
        summary: one line for ``--help``.
        argument: what ``NAME:ARG`` takes, for messages (``"S"``); None: no argument.
        deterministic: the same result whatever the timing of messages (bit-reproducible
            run to run; a GradScaler and a membership change rely on it).
        polls_itself: it moves its own messages (no communication thread is built).
        follows_shrink: it can go on after a membership change (``--on-failure``).
        carries_factors: sufficient factors can ride it (a stale or lagged exchange
            carries whole buckets).
        sends_idle: a step the schedule leaves idle still sends (a weight-0 frame), so
            the bytes per step are not scaled by the schedule's active share.
        catches_up: ``behind()``/``skip_step()`` mean something (a slow rank skips compute).
        forward_window: with the parameter mix, at most this many buckets are on the wire
            at once, in forward order (None: no window).
        collectives_ok: a collective every few steps (the consensus monitor, adaptive
            averaging) is welcome; False: the timing avoids such barriers.
        local_steps: ranks take steps of their own between exchanges, and an exchange
            moves the parameters whatever ``--mix`` says (their change since the last
            exchange is the pseudo-gradient an outer rule steps on).
        uses: exchange options this timing reads whatever the strategy (the outer rule's,
            the dense window's), accepted with every strategy that takes the timing.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    argument: ClassVar[str | None] = None
    deterministic: ClassVar[bool] = True
    polls_itself: ClassVar[bool] = False
    follows_shrink: ClassVar[bool] = True
    carries_factors: ClassVar[bool] = True
    sends_idle: ClassVar[bool] = False
    catches_up: ClassVar[bool] = False
    forward_window: ClassVar[int | None] = None
    collectives_ok: ClassVar[bool] = True
    local_steps: ClassVar[bool] = False
    uses: ClassVar[frozenset[str]] = frozenset()

    def parse(self, arg: str | None) -> tuple[int, ...]:
        """The validated argument of ``NAME:ARG`` (``()`` for none); ValueError naming the
        flag and a valid example."""
        if arg:
            raise ValueError(f"--timing {self.name} takes no argument, got {arg!r}")
        return ()

    def spelled(self, args: tuple[int, ...]) -> str:
        """``NAME[:ARG]`` as the options hold it (the inverse of :meth:`parse`)."""
        return ":".join([self.name, *map(str, args)])

    def aliases(self, args: tuple[int, ...]) -> dict[str, int]:
        """The values of the older fields this timing stands for (``staleness``,
        ``max_lag``); the others are 0."""
        return {}

    def check(self, args: tuple[int, ...], opts: Any) -> None:
        """ValueError (one line) where these exchange options cannot run this timing."""

    def legacy_refusal(self, args: tuple[int, ...], given: str) -> str | None:
        """Why this timing does not combine with ``given``, the older spellings set
        (``--staleness 1``, ``--max-lag S``); None: they are read as this timing's."""
        return None

    def send_share(self, args: tuple[int, ...]) -> float:
        """The share of steps whose exchange puts bytes on the wire (1.0: every step)."""
        return 1.0

    def amp_refusal(self, args: tuple[int, ...], mix: str) -> str | None:
        """Why a GradScaler cannot drive steps under this timing (None: it can)."""
        return None

    def agreement_period(self, args: tuple[int, ...]) -> int:
        """Steps between two stop agreements and join checks (1: every step)."""
        return 1

    def build(self, ctx: Any) -> Any:
        """The runtime timing for one communicator (collective where it duplicates it)."""
        raise NotImplementedError(f"timing {self.name!r} does not say how to build itself")
