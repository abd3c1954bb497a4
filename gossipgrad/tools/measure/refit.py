"""Refit a saved ``gossipgrad netfit`` document from the times it recorded.

    gossipgrad netfit --refit old-network.json --out network.json

A netfit document keeps every sweep's measured times under ``measurements``; this recomputes
each fit (``p2p`` from the ping-pong, ``allreduce`` and ``allreduce_in_flight``,
``concurrent``, the exchange's duplex) with today's :func:`gossipgrad.tools.plan.fit.fit_link`, so
a network measured before the fit changed can be planned with without measuring it again.
Nothing else changes: sizes, ``host``, ``ranks_per_node`` and ``source`` are kept; ``refit``
records what was done.

PURE: no MPI (a refit needs no launch).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gossipgrad.tools.plan.fit import fit_link, relative_errors
from gossipgrad.tools.plan.formats import LinkFit, NetworkFit

# document key -> the sweep under "measurements" it is fitted from
FITTED = (
    ("p2p", "pingpong"),
    ("allreduce", "allreduce"),
    ("concurrent", "concurrent"),
    ("allreduce_in_flight", "allreduce_in_flight"),
)


def load_document(path: str | Path) -> dict[str, Any]:
    """The netfit document at ``path`` as read (``ValueError`` if it is not a JSON object)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"network file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"network file {str(path)!r} must hold a JSON object")
    return data


def refit_network(data: Mapping[str, Any], where: str = "network") -> dict[str, Any]:
    """A copy of the netfit document ``data`` with every fit recomputed from its recorded
    times. Raises ``ValueError`` naming ``where`` when the document has no recorded times
    (written by hand, or by a netfit older than the ``measurements`` block) or they cannot
    be fitted."""
    out = copy.deepcopy(dict(data))
    measured = out.get("measurements")
    if not isinstance(measured, dict) or not isinstance(measured.get("pingpong"), dict):
        raise ValueError(
            f"{where}: no recorded ping-pong times ('measurements.pingpong'), nothing to refit "
            "from: measure again with gossipgrad netfit"
        )
    for key, sweep in FITTED:
        if key in out and isinstance(measured.get(sweep), dict):
            fit = _fit(measured[sweep], f"{where}: measurements.{sweep}")
            out[key].update(alpha_s=fit.alpha_s, beta_s_per_byte=fit.beta_s_per_byte, r2=fit.r2)
    if isinstance(measured.get("exchange"), dict) and "exchange_fit" in measured:
        ex = _fit(measured["exchange"], f"{where}: measurements.exchange")
        measured["exchange_fit"] = {
            "alpha_s": ex.alpha_s,
            "beta_s_per_byte": ex.beta_s_per_byte,
            "r2": ex.r2,
            "duplex": ex.beta_s_per_byte / out["p2p"]["beta_s_per_byte"],
        }
    out["refit"] = "fits recomputed from the recorded times (gossipgrad netfit --refit)"
    NetworkFit.from_json(out)  # the result must still be a network the planner reads
    return out


def stale_fit(
    data: Mapping[str, Any], where: str = "network", tolerance: float = 1.25
) -> str | None:
    """A one-line warning when ``data``'s ``p2p`` bandwidth and today's fit of its recorded
    ping-pong times differ by more than ``tolerance`` either way (a file written by a netfit
    older than the two-regime fit, or edited by hand), else None. None too when there are
    no recorded times to compare with, or they cannot be fitted.

        >>> times = {"nbytes": [4096, 1 << 20, 1 << 21], "seconds": [1e-4, 8.4e-3, 1.68e-2]}
        >>> doc = {"p2p": {"beta_s_per_byte": 2e-9}, "measurements": {"pingpong": times}}
        >>> stale_fit(doc, "net.json").split(":")[0]
        "net.json's ping-pong fit says 4 Gbit/s"
    """
    try:
        recorded = data["measurements"]["pingpong"]
        beta = float(data["p2p"]["beta_s_per_byte"])
        today = fit_link(recorded["nbytes"], recorded["seconds"]).beta_s_per_byte
    except (KeyError, TypeError, ValueError):
        return None
    if not beta > 0 or 1 / tolerance <= today / beta <= tolerance:
        return None  # a non-positive beta is NetworkFit's to refuse
    return (
        f"{where}'s ping-pong fit says {8 / beta / 1e9:.3g} Gbit/s: its recorded times say "
        f"{8 / today / 1e9:.3g} (written by an older netfit?); plan with a refitted copy: "
        f"gossipgrad netfit --refit {where} --out refitted.json"
    )


def _fit(sweep: dict[str, Any], where: str) -> LinkFit:
    try:
        nbytes, seconds = sweep["nbytes"], sweep["seconds"]
        fit = fit_link(nbytes, seconds)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: cannot refit: {exc}") from None
    sweep["relative_error"] = [round(e, 4) for e in relative_errors(fit, nbytes, seconds)]
    return fit
