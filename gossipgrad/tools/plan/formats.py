"""Input formats of the planner: a compute profile and a network fit, both JSON.

Produced by ``gossipgrad profile`` and ``gossipgrad netfit``; read here, never written by
training. Every field is validated on load and a bad value raises ``ValueError`` naming the
field, e.g. ``profile field 'buckets[2].ready_s' must be <= backward_s (0.2), got 0.3``.

    >>> p = Profile.from_json({"model": "m", "batch_size": 8, "device": "cpu",
    ...     "forward_s": 0.1, "backward_s": 0.2, "optimizer_s": 0.01, "param_bytes": 8,
    ...     "buckets": [{"index": 0, "bytes": 8, "ready_s": 0.2}]})
    >>> p.compute_s
    0.30000000000000004

Unknown keys are ignored (newer producers may add fields). Objects are immutable.
"""

# Over 300 lines on purpose: both input documents and every field's check, in one place.

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from gossipgrad.tools.plan.host import HostShare


def _get(data: Mapping[str, Any], key: str, where: str = "", *, optional: bool = False) -> Any:
    """``data[key]``; ``where`` is the dotted path of ``data`` inside the document."""
    if not isinstance(data, Mapping):
        what = f"field {where!r}" if where else "document"
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")  # noqa: TRY004
    if key not in data:
        if optional:
            return None
        name = f"{where}.{key}" if where else key
        raise ValueError(f"field {name!r} is missing")
    return data[key]


def _number(value: Any, name: str, *, minimum: float | None = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"field {name!r} must be a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"field {name!r} must be >= {minimum}, got {value!r}")
    return float(value)


def _integer(value: Any, name: str, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field {name!r} must be an integer, got {value!r}")  # noqa: TRY004
    if value < minimum:
        raise ValueError(f"field {name!r} must be >= {minimum}, got {value!r}")
    return value


def _string(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"field {name!r} must be a non-empty string, got {value!r}")
    return value


def _in(kind: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a field check and prefix its message with the document kind."""
    try:
        return fn(*args, **kwargs)
    except ValueError as e:
        raise ValueError(f"{kind} {e}") from None


@dataclass(frozen=True)
class Bucket:
    """A flat buffer of gradients; ``ready_s`` is measured from the start of backward."""

    index: int
    bytes: int
    ready_s: float


@dataclass(frozen=True)
class LinearLayer:
    """A Linear layer whose weight gradient could travel as sufficient factors: the
    weight's bucket (``bucket``, a profile bucket index: one bucket per parameter), its
    ``out_features`` x ``in_features`` and the ``rows`` of input it sees per step."""

    bucket: int
    out_features: int
    in_features: int
    rows: int


class _JsonFile:
    """``load(path)`` and ``save(path)`` for a record with ``from_json``/``to_json``."""

    KIND: ClassVar[str]  # the file's kind, named in errors

    @classmethod
    def load(cls, path: str | Path) -> Any:
        return cls.from_json(_read_json(path, cls.KIND))  # type: ignore[attr-defined]

    def save(self, path: str | Path) -> None:
        text = json.dumps(self.to_json(), indent=2)  # type: ignore[attr-defined]
        Path(path).write_text(text + "\n")


@dataclass(frozen=True)
class Profile(_JsonFile):
    """One rank's measured step, without communication (``gossipgrad profile``).

    Invariants: ``buckets`` are in the order backward produces them; every ``ready_s`` lies in
    ``[0, backward_s]``; bucket bytes sum to at most ``param_bytes``. Profile with the finest
    buckets you can (one per parameter is best): the planner can merge buckets, never split.
    ``per_parameter``: one bucket per parameter, its ``index`` the parameter's position in
    ``model.parameters()``, so the planner can group them as the engine does (in reverse
    registration order, :func:`gossipgrad.tools.plan.model.rebucket`).
    """

    KIND: ClassVar[str] = "profile"

    model: str
    batch_size: int
    device: str
    forward_s: float
    backward_s: float
    optimizer_s: float
    param_bytes: int
    buckets: tuple[Bucket, ...]
    memory_bytes: int | None = None
    linear: tuple[LinearLayer, ...] = ()
    per_parameter: bool = False

    @property
    def compute_s(self) -> float:
        """Forward plus backward time."""
        return self.forward_s + self.backward_s

    @property
    def local_step_s(self) -> float:
        """Step time with no communication at all: the T(1) of the efficiency."""
        return self.forward_s + self.backward_s + self.optimizer_s

    @property
    def grad_bytes(self) -> int:
        return sum(b.bytes for b in self.buckets)

    def with_buckets(self, buckets: Sequence[Bucket]) -> Profile:
        return replace(self, buckets=tuple(buckets))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Profile:
        return _in("profile", _profile_from_json, data)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "model": self.model,
            "batch_size": self.batch_size,
            "device": self.device,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "optimizer_s": self.optimizer_s,
            "param_bytes": self.param_bytes,
            "buckets": [
                {"index": b.index, "bytes": b.bytes, "ready_s": b.ready_s} for b in self.buckets
            ],
        }
        if self.memory_bytes is not None:
            out["memory_bytes"] = self.memory_bytes
        if self.linear:
            out["linear"] = [dict(vars(layer)) for layer in self.linear]
        if self.per_parameter:
            out["per_parameter"] = True
        return out


def _linear_from_json(raw: Any, indices: set[int]) -> tuple[LinearLayer, ...]:
    if not isinstance(raw, list):
        raise ValueError(f"field 'linear' must be a list, got {raw!r}")
    out = []
    for i, layer in enumerate(raw):
        where = f"linear[{i}]"
        bucket = _integer(_get(layer, "bucket", where), f"{where}.bucket")
        if bucket not in indices:
            raise ValueError(f"field '{where}.bucket' names no bucket index, got {bucket}")
        dims = [
            _integer(_get(layer, k, where), f"{where}.{k}", minimum=lo)
            for k, lo in (("out_features", 1), ("in_features", 1), ("rows", 0))
        ]
        out.append(LinearLayer(bucket, *dims))
    return tuple(out)


def _profile_from_json(data: Mapping[str, Any]) -> Profile:
    def g(key: str, **kw: Any) -> Any:
        return _get(data, key, **kw)

    backward_s = _number(g("backward_s"), "backward_s")
    raw = g("buckets")
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"field 'buckets' must be a non-empty list, got {raw!r}")
    buckets, seen = [], set()
    for i, b in enumerate(raw):
        where = f"buckets[{i}]"
        index = _integer(_get(b, "index", where), f"{where}.index")
        if index in seen:
            raise ValueError(f"field '{where}.index' repeats index {index}")
        seen.add(index)
        nbytes = _integer(_get(b, "bytes", where), f"{where}.bytes", minimum=1)
        ready = _number(_get(b, "ready_s", where), f"{where}.ready_s")
        if ready > backward_s:
            raise ValueError(
                f"field '{where}.ready_s' must be <= backward_s ({backward_s}), got {ready}"
            )
        buckets.append(Bucket(index, nbytes, ready))
    param_bytes = _integer(g("param_bytes"), "param_bytes")
    total = sum(b.bytes for b in buckets)
    if total > param_bytes:
        raise ValueError(
            f"field 'buckets' holds {total} bytes, more than param_bytes ({param_bytes})"
        )
    memory = g("memory_bytes", optional=True)
    raw_linear = g("linear", optional=True)
    per_parameter = g("per_parameter", optional=True)
    if per_parameter is not None and not isinstance(per_parameter, bool):
        raise ValueError(f"field 'per_parameter' must be true or false, got {per_parameter!r}")
    return Profile(
        model=_string(g("model"), "model"),
        batch_size=_integer(g("batch_size"), "batch_size", minimum=1),
        device=_string(g("device"), "device"),
        forward_s=_number(g("forward_s"), "forward_s"),
        backward_s=backward_s,
        optimizer_s=_number(g("optimizer_s"), "optimizer_s"),
        param_bytes=param_bytes,
        buckets=tuple(buckets),
        memory_bytes=None if memory is None else _integer(memory, "memory_bytes"),
        linear=() if raw_linear is None else _linear_from_json(raw_linear, seen),
        per_parameter=bool(per_parameter),
    )


@dataclass(frozen=True)
class LinkFit:
    """``time(n) = alpha_s + beta_s_per_byte * n``, fitted with coefficient ``r2``."""

    alpha_s: float
    beta_s_per_byte: float
    r2: float

    def seconds(self, nbytes: float) -> float:
        return self.alpha_s + self.beta_s_per_byte * nbytes


@dataclass(frozen=True)
class AllreduceFit(LinkFit):
    """A measured allreduce fit, valid at ``size`` ranks only; ``in_flight``: how many
    allreduces were posted at once (the fit is then the time per allreduce)."""

    size: int = 2
    in_flight: int = 1


@dataclass(frozen=True)
class ConcurrentFit(LinkFit):
    """One rank's time to send and receive ``n`` bytes while all ``size`` ranks do (a ring
    shift, ``netfit``'s ``concurrent`` sweep): what a link gives when the job loads it."""

    size: int = 2


@dataclass(frozen=True)
class NetworkFit(_JsonFile):
    """``gossipgrad netfit`` output. ``p2p`` is one-way ping-pong time; ``allreduce`` is
    optional and only used to calibrate the ring model (see ``CommModel.from_network``);
    ``host`` (optional) is the cores and ranks per host the fit was taken with: whether
    overlap can hide communication there (see ``step_time``). ``concurrent`` (optional):
    every rank sending at once; ``ranks_per_node``: ranks that share one network interface
    (a network namespace counts as a node), both read by :mod:`gossipgrad.tools.plan.terms`.
    ``allreduce_in_flight`` (optional): allreduces posted several at once, per allreduce,
    the cost of a bucket queued behind another (``CommModel.from_network``)."""

    KIND: ClassVar[str] = "network"

    p2p: LinkFit
    allreduce: AllreduceFit | None = None
    source: str = field(default="unknown")
    host: HostShare | None = None
    concurrent: ConcurrentFit | None = None
    ranks_per_node: int | None = None
    allreduce_in_flight: AllreduceFit | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NetworkFit:
        return _in("network", _network_from_json, data)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"p2p": _link_json(self.p2p), "source": self.source}
        if self.allreduce is not None:
            out["allreduce"] = {**_link_json(self.allreduce), "size": self.allreduce.size}
        if self.host is not None:
            out["host"] = self.host.to_json()
        if self.concurrent is not None:
            out["concurrent"] = {**_link_json(self.concurrent), "size": self.concurrent.size}
        if self.ranks_per_node is not None:
            out["ranks_per_node"] = self.ranks_per_node
        if self.allreduce_in_flight is not None:
            fit = self.allreduce_in_flight
            out["allreduce_in_flight"] = {
                **_link_json(fit),
                "size": fit.size,
                "in_flight": fit.in_flight,
            }
        return out


def _link_json(fit: LinkFit) -> dict[str, float]:
    return {"alpha_s": fit.alpha_s, "beta_s_per_byte": fit.beta_s_per_byte, "r2": fit.r2}


def _link_from_json(data: Any, where: str) -> tuple[float, float, float]:
    alpha = _number(_get(data, "alpha_s", where), f"{where}.alpha_s")
    beta = _number(_get(data, "beta_s_per_byte", where), f"{where}.beta_s_per_byte")
    r2 = _number(_get(data, "r2", where), f"{where}.r2", minimum=None)
    if r2 > 1.0:
        raise ValueError(f"field '{where}.r2' must be <= 1, got {r2}")
    return alpha, beta, r2


F = TypeVar("F", AllreduceFit, ConcurrentFit)


def _sized_fit(data: Mapping[str, Any], key: str, kind: type[F], minimum: int) -> F | None:
    """The optional fit ``key`` (alpha, beta, r2 and the ``size`` it was measured at)."""
    raw = _get(data, key, optional=True)
    if raw is None:
        return None
    alpha, beta, r2 = _link_from_json(raw, key)
    size = _integer(_get(raw, "size", key), f"{key}.size", minimum=minimum)
    return kind(alpha, beta, r2, size=size)


def _network_from_json(data: Mapping[str, Any]) -> NetworkFit:
    p2p = LinkFit(*_link_from_json(_get(data, "p2p"), "p2p"))
    allreduce = _sized_fit(data, "allreduce", AllreduceFit, minimum=1)
    source = _get(data, "source", optional=True)
    raw_host = _get(data, "host", optional=True)
    host = None if raw_host is None else HostShare.from_json(raw_host)
    concurrent = _sized_fit(data, "concurrent", ConcurrentFit, minimum=2)
    per_node = _get(data, "ranks_per_node", optional=True)
    in_flight = _sized_fit(data, "allreduce_in_flight", AllreduceFit, minimum=2)
    if in_flight is not None:
        raw = _get(data, "allreduce_in_flight")
        k = _integer(
            _get(raw, "in_flight", "allreduce_in_flight"),
            "allreduce_in_flight.in_flight",
            minimum=1,
        )
        in_flight = replace(in_flight, in_flight=k)
    return NetworkFit(
        p2p,
        allreduce,
        "unknown" if source is None else _string(source, "source"),
        host,
        concurrent,
        None if per_node is None else _integer(per_node, "ranks_per_node", minimum=1),
        in_flight,
    )


def _read_json(path: str | Path, kind: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{kind} file {str(path)!r} is not valid JSON: {e}") from None
