"""The stand-in profile: what each leaf module of a model costs on a named accelerator.

    profile = StandinProfile.load("resnet50-p100-fp32-b64")   # shipped, or a path
    profile.layer("layer1.0.conv1").forward_s                 # seconds per step, all calls

A stand-in profile is a planner profile (:class:`gossipgrad.tools.plan.formats.Profile`: phase
times, one bucket per parameter in backward order with its gradient-ready time) plus
``layers``, one record per leaf module in registration order::

    {"format": "gossipgrad.standin/1", "arch": "resnet50", "hidden": 0,
     "input_shape": [3, 224, 224], "classes": 1000, "precision": "fp32",
     "source": {"kind": "published" | "measured", ...},
     "model": ..., "batch_size": 64, "device": ..., "forward_s": ..., "backward_s": ...,
     "optimizer_s": ..., "param_bytes": ..., "buckets": [...],
     "layers": [{"name": "conv1", "kind": "Conv2d", "calls": 1,
                 "forward_s": ..., "backward_s": ...}, ...]}

Invariants checked on load (each failure is one line naming the file and the field): the
layers' ``forward_s`` sum to the profile's ``forward_s`` and their ``backward_s`` to its
``backward_s`` (relative 1e-6: a profile's per-layer times *are* its step), names are
unique, ``calls`` >= 0 (0: never run in a training forward, then both times are 0). So
``gossipgrad plan --profile`` reads a stand-in profile unchanged.

PURE: stdlib and :mod:`gossipgrad.tools.plan.formats` only.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from gossipgrad.tools.plan.formats import Profile

FORMAT = "gossipgrad.standin/1"
SOURCE_KINDS = ("published", "measured")
PRECISIONS = ("fp32", "bf16", "fp16")
ALIASES = {
    "resnet50": "resnet50-p100-fp32-b64",
    "vgg16": "vgg16-p100-fp32-b64",
    "googlenet": "googlenet-p100pcie-fp32-b128",
}
"""Short names for shipped profiles (``--device standin:resnet50``)."""
SUM_TOLERANCE = 1e-6  # relative: the layers' times must add up to the phase times


@dataclass(frozen=True)
class LayerTime:
    """One leaf module: seconds per step over its ``calls`` calls (a module called three
    times per forward, as ResNet's shared ReLU is, spends a third of each per call)."""

    name: str
    kind: str
    calls: int
    forward_s: float
    backward_s: float

    def per_call(self) -> tuple[float, float]:
        """(forward, backward) seconds of one call."""
        n = max(1, self.calls)
        return self.forward_s / n, self.backward_s / n


@dataclass(frozen=True)
class StandinProfile:
    """A planner :class:`Profile` plus per-layer times and where they come from.

    ``name`` is what the user passed (a shipped name or a path), used in messages.
    """

    name: str
    arch: str
    hidden: int
    input_shape: tuple[int, ...]
    classes: int
    precision: str
    source: Mapping[str, Any]
    planner: Profile
    layers: tuple[LayerTime, ...]
    bucket_names: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.planner.batch_size

    @property
    def device(self) -> str:
        return self.planner.device

    @property
    def compute_s(self) -> float:
        """Forward + backward + optimizer: one rank's step with no communication."""
        return self.planner.local_step_s

    def layer(self, name: str) -> LayerTime:
        for lt in self.layers:
            if lt.name == name:
                return lt
        raise KeyError(name)

    def describe(self) -> str:
        """``resnet50, batch 64, fp32, on NVIDIA Tesla P100-SXM2; published: ...``."""
        what = self.source.get("reference") or self.source.get("command") or ""
        return (
            f"{self.arch}, batch {self.batch_size}, {self.precision}, on {self.device}; "
            f"{self.source.get('kind')}{': ' + what if what else ''}"
        )

    @classmethod
    def from_json(cls, data: Any, name: str = "<profile>") -> StandinProfile:
        try:
            return _parse(data, name)
        except ValueError as e:
            raise ValueError(f"stand-in profile {name}: {e}") from None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT,
            "arch": self.arch,
            "hidden": self.hidden,
            "input_shape": list(self.input_shape),
            "classes": self.classes,
            "precision": self.precision,
            "source": dict(self.source),
            **self._planner_json(),
            "layers": [dataclasses.asdict(lt) for lt in self.layers],
        }
        for key, value in self.extra.items():
            out.setdefault(key, value)
        return out

    def _planner_json(self) -> dict[str, Any]:
        out = self.planner.to_json()
        if len(self.bucket_names) == len(out["buckets"]):
            for bucket, pname in zip(out["buckets"], self.bucket_names, strict=True):
                bucket["name"] = pname
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def load(cls, spec: str | Path) -> StandinProfile:
        """A shipped profile by name (``resnet50-p100-fp32-b64``, or an alias of
        :data:`ALIASES` such as ``resnet50``), else a JSON file."""
        text, name = _read(str(spec))
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"stand-in profile {name}: not valid JSON: {e}") from None
        return cls.from_json(data, name)


def shipped() -> list[str]:
    """Names of the profiles shipped in ``gossipgrad/tools/devices/profiles/``."""
    folder = resources.files("gossipgrad.tools.devices") / "profiles"
    if not folder.is_dir():
        return []
    return sorted(p.name[: -len(".json")] for p in folder.iterdir() if p.name.endswith(".json"))


def _read(spec: str) -> tuple[str, str]:
    """(text, name for messages) of a shipped profile or a file."""
    spec = ALIASES.get(spec, spec) if not Path(spec).is_file() else spec
    if spec in shipped():
        item = resources.files("gossipgrad.tools.devices") / "profiles" / f"{spec}.json"
        return item.read_text(encoding="utf-8"), f"{spec} (shipped)"
    path = Path(spec)
    if not path.is_file():
        raise ValueError(
            f"stand-in profile {spec!r}: no such file, and no shipped profile of that name "
            f"(shipped: {', '.join(shipped()) or 'none'}; short names: {', '.join(ALIASES)})"
        )
    return path.read_text(encoding="utf-8"), str(path)


def _field(data: Any, key: str, where: str = "") -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"field {where or 'document'!r} must be a JSON object")  # noqa: TRY004
    if key not in data:
        raise ValueError(f"field {(where + '.' if where else '') + key!r} is missing")
    return data[key]


def _nonneg(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"field {name!r} must be a finite number, got {value!r}")
    if value < 0:
        raise ValueError(f"field {name!r} must be >= 0, got {value!r}")
    return float(value)


def _count(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"field {name!r} must be an integer >= {minimum}, got {value!r}")
    return value


def _parse(data: Any, name: str) -> StandinProfile:
    fmt = _field(data, "format")
    if fmt != FORMAT:
        raise ValueError(f"field 'format' must be {FORMAT!r}, got {fmt!r}")
    try:
        planner = Profile.from_json(data)
    except ValueError as e:  # "profile field 'x' ..." -> "field 'x' ..."
        raise ValueError(str(e).removeprefix("profile ")) from None
    shape = _field(data, "input_shape")
    if not isinstance(shape, list) or not shape:
        raise ValueError(f"field 'input_shape' must be a non-empty list, got {shape!r}")
    dims = tuple(_count(d, f"input_shape[{i}]", 1) for i, d in enumerate(shape))
    precision = _field(data, "precision")
    if precision not in PRECISIONS:
        raise ValueError(f"field 'precision' must be one of {', '.join(PRECISIONS)}")
    source = _field(data, "source")
    kind = _field(source, "kind", "source")
    if kind not in SOURCE_KINDS:
        raise ValueError(f"field 'source.kind' must be one of {', '.join(SOURCE_KINDS)}")
    arch = _field(data, "arch")
    if not isinstance(arch, str) or not arch:
        raise ValueError(f"field 'arch' must be a non-empty string, got {arch!r}")
    layers = _layers(_field(data, "layers"), planner)
    known = {"format", "arch", "hidden", "input_shape", "classes", "precision", "source", "layers"}
    extra = {k: v for k, v in data.items() if k not in known and k not in planner.to_json()}
    names = tuple(str(b.get("name", "")) for b in data["buckets"])
    if all(names):  # one named bucket per parameter, indexed by registration position
        planner = dataclasses.replace(planner, per_parameter=True)
    return StandinProfile(
        name=name,
        arch=arch,
        hidden=_count(data.get("hidden", 0), "hidden"),
        input_shape=dims,
        classes=_count(_field(data, "classes"), "classes", 1),
        precision=precision,
        source=dict(source),
        planner=planner,
        layers=layers,
        bucket_names=names if all(names) else (),
        extra=extra,
    )


def _layers(raw: Any, planner: Profile) -> tuple[LayerTime, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"field 'layers' must be a non-empty list, got {raw!r}")
    out, seen = [], set()
    for i, rec in enumerate(raw):
        where = f"layers[{i}]"
        lname = _field(rec, "name", where)
        if not isinstance(lname, str) or lname in seen:
            raise ValueError(f"field '{where}.name' must be a unique string, got {lname!r}")
        seen.add(lname)
        calls = _count(_field(rec, "calls", where), f"{where}.calls")
        fwd = _nonneg(_field(rec, "forward_s", where), f"{where}.forward_s")
        bwd = _nonneg(_field(rec, "backward_s", where), f"{where}.backward_s")
        if calls == 0 and (fwd or bwd):
            raise ValueError(f"field '{where}.calls' is 0 but the layer has times")
        out.append(LayerTime(lname, str(rec.get("kind", "")), calls, fwd, bwd))
    for phase in ("forward_s", "backward_s"):
        total = sum(getattr(lt, phase) for lt in out)
        want = getattr(planner, phase)
        if abs(total - want) > SUM_TOLERANCE * max(want, 1e-9):
            raise ValueError(
                f"field 'layers' {phase} sum to {total:.9g} s, but field '{phase}' is "
                f"{want:.9g} s (a profile's layers must add up to its step)"
            )
    return tuple(out)
