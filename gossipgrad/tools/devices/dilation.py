"""Time dilation: every stand-in compute time x K, run behind links K times slower.

A cluster of GPU hosts on 10 Gbit/s links is stood in for, at K = 10, by stand-in ranks whose
compute takes 10x its profile time behind emulated 1 Gbit/s links (``scripts/emucluster.py
run --rate 1gbit``): compute and wire time both grow by K, so their ratio (what decides
whether gossip hides its exchange behind backward) is the cluster's. A one-way latency L
is emulated as K x L (``--delay-ms``). Measured seconds divide by K, samples per second
multiply by K.

What does *not* dilate: the host's own work (Python, hooks, copies into buckets, the mixing
arithmetic, MPI progress). Undilated, it counts K times cheaper than it was; on a host
where many ranks share few cores it was dearer than on the cluster to begin with. Reports
give both figures.

PURE: stdlib only.

    >>> d = Dilation(10)
    >>> d.device_s(0.292), d.undilated(2.92), d.samples_per_s(21.9)
    (2.92, 0.292, 219.0)
    >>> d.emulated_rate("10gbit"), d.stands_for_rate("1gbit")
    ('1gbit', '10gbit')
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(bit|bps)\s*$", re.IGNORECASE)


def parse_rate(text: str) -> float:
    """``"10gbit"`` -> 1e10 bits per second (tc's units: kbit, mbit, gbit, tbit).

    >>> parse_rate("25gbit"), parse_rate("100mbit")
    (25000000000.0, 100000000.0)
    """
    m = _RATE.match(text)
    if not m:
        raise ValueError(f"link rate {text!r}: expected a number and kbit, mbit, gbit or tbit")
    return float(m.group(1)) * _UNITS[m.group(2).lower()]


def format_rate(bits_per_s: float) -> str:
    """The shortest tc rate for ``bits_per_s`` (``1e9`` -> ``"1gbit"``)."""
    for unit, scale in (("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{unit}"
    return f"{bits_per_s:g}bit"


@dataclass(frozen=True)
class Dilation:
    """``factor`` K > 0: compute seconds x K on the stand-in, wall seconds / K in reports."""

    factor: float = 1.0

    def __post_init__(self) -> None:
        k = self.factor
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not math.isfinite(k) or k <= 0:
            raise ValueError(f"--dilate must be a finite number > 0, got {k!r}")

    def device_s(self, profile_s: float) -> float:
        """What a profile time takes on the dilated stand-in."""
        return profile_s * self.factor

    def undilated(self, measured_s: float) -> float:
        """A measured (dilated) duration in the time of the cluster stood in for."""
        return measured_s / self.factor

    def samples_per_s(self, measured: float) -> float:
        """A measured (dilated) rate in the time of the cluster stood in for."""
        return measured * self.factor

    def emulated_rate(self, target: str) -> str:
        """The link rate to emulate for a cluster link of ``target`` (tc units)."""
        return format_rate(parse_rate(target) / self.factor)

    def stands_for_rate(self, emulated: str) -> str:
        """The cluster link rate an emulated ``emulated`` rate stands for at this K."""
        return format_rate(parse_rate(emulated) * self.factor)

    def emulated_delay_ms(self, target_ms: float) -> float:
        """The one-way delay to inject for a cluster latency of ``target_ms``."""
        return target_ms * self.factor
