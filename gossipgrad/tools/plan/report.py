"""One call from files to a report: what ``gossipgrad plan`` runs (the CLI only parses).

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "p.json").write_text(json.dumps({"model": "m", "batch_size": 8,
...     "device": "cpu", "forward_s": 0.1, "backward_s": 0.2, "optimizer_s": 0.0,
...     "param_bytes": 8, "buckets": [{"index": 0, "bytes": 8, "ready_s": 0.2}]}))
>>> _ = (d / "n.json").write_text(json.dumps(
...     {"p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 1.0}}))
>>> "Recommended" in plan_report(d / "p.json", d / "n.json", sizes=[1, 4])
True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gossipgrad.registry import CODECS
from gossipgrad.tools.plan.calibrate import scale_exchange, scale_profile
from gossipgrad.tools.plan.convergence import ConvergenceReport, read_lines, steps_to_target
from gossipgrad.tools.plan.formats import NetworkFit, Profile
from gossipgrad.tools.plan.host import HostShare
from gossipgrad.tools.plan.model import CommModel, on_the_wire, shape_of
from gossipgrad.tools.plan.options import PlanOptions, plan_options
from gossipgrad.tools.plan.planner import (
    PlanRow,
    plan,
    plot_png,
    render_markdown,
)
from gossipgrad.tools.plan.steps import measured_steps
from gossipgrad.tools.plan.tta import read_step_times, render_tta, tta_rows, tta_rows_measured
from gossipgrad.tools.plan.verdict import cannot_help, link_gbit


# Over 60 lines on purpose: reads the inputs, plans, and writes every output format from one set
# of results.
def plan_report(options: PlanOptions | str | Path | None = None, *args: Any, **fields: Any) -> str:
    """Load the profile and network fit, predict every configuration of ``options``
    (:class:`~gossipgrad.tools.plan.options.PlanOptions`; or its fields, the two paths first,
    as keywords), and return the markdown report; also writes a PNG when ``png_path`` is
    given, and the time to accuracy with ``metrics_path`` and ``target_accuracy``
    (:mod:`gossipgrad.tools.plan.tta`)."""
    if not isinstance(options, PlanOptions | None):  # the paths given positionally
        options = PlanOptions(options, *args, **fields)
        fields = {}
    o = plan_options(options, fields)
    strategies = list(o.strategies)
    wire, exchange_factor, compute_factor = o.wire, o.exchange_factor, o.compute_factor
    profile = scale_profile(Profile.load(o.profile_path), compute_factor)
    network = NetworkFit.load(o.network_path)
    model = CommModel.from_network(
        network, duplex=o.duplex, calibrate_allreduce=o.calibrate_allreduce
    )
    model = replace(
        model, fabric=replace(model.fabric, **dict(o.fabric or {})), interference=o.interference
    )
    for strategy, factor in (exchange_factor or {}).items():
        model = scale_exchange(model, strategy, factor)
    refused = {}
    if wire != "fp32":
        model = codec_on_the_wire(model, wire)
        strategies, refused = strategies_taking(strategies, wire)
    host = resolve_host(
        network.host, o.host_cores, o.ranks_per_host, o.handoff_s, o.stale_s_per_byte, o.overlap_s
    )
    feedback = bool(getattr(CODECS.get(wire), "feedback_default", False))
    rows = plan(profile, model, o.replace(strategies=strategies), host=host, wire_feedback=feedback)
    convergence, tta = metrics_sections(
        rows, o.metrics_path, o.target_accuracy, o.step_times, at_size=o.steps_at_size
    )
    title = report_title(profile, network, host, compute_factor, exchange_factor)
    if wire != "fp32":
        title += f"; wire {wire} ({model.wire_ratio:.3g}x the bytes)"
        if refused:
            title += f"; left out (not with {wire}): {', '.join(refused)}"
    if not o.ps_split and any(shape_of(s).incast for s in strategies):
        title += "; ps keeps every parameter on one owner (--ps-whole)"
    if o.png_path is not None:
        plot_png(rows, o.png_path, title=f"{profile.model}: predicted efficiency")
    verdict = cannot_help(rows, profile.local_step_s, link_gbit(model.beta_s_per_byte))
    return (
        render_markdown(
            rows,
            title=title,
            convergence=convergence,
            all_rows=o.all_rows,
            tie_tolerance=o.tie_tolerance,
        )
        + tta
        + "".join(f"\n{line}\n" for line in verdict)
    )


def codec_on_the_wire(model: CommModel, wire: str) -> CommModel:
    """``model`` with every bucket sent through codec ``wire``
    (:func:`~gossipgrad.tools.plan.model.on_the_wire` at the codec's own ``wire_ratio`` for fp32
    buckets).

        >>> round(codec_on_the_wire(CommModel(1e-5, 1e-9), "fp8").wire_ratio, 3)
        0.252
    """
    return on_the_wire(model, CODECS.get(wire)().wire_ratio(4))


def strategies_taking(strategies: Iterable[str], wire: str) -> tuple[list[str], dict[str, str]]:
    """The strategies that run with ``--wire wire`` (as ``train`` checks them; one that
    sends nothing, as it is), and why each other one does not; none left is a ValueError.

        >>> strategies_taking(["gossip", "horovod", "local"], "bf16")[0]
        ['gossip', 'local']
    """
    from gossipgrad.options import wire_refusal

    kept, refused = [], {}
    for name in strategies:
        why = None if not shape_of(name).moves else wire_refusal(name, wire)
        if why is None:
            kept.append(name)
        else:
            refused[name] = why
    if not kept:
        raise ValueError(
            f"--wire {wire}: no strategy planned takes it ({'; '.join(refused.values())})"
        )
    return kept, refused


def metrics_sections(
    rows: Sequence[PlanRow],
    metrics_path: str | Path | Sequence[str | Path] | None,
    target: float | None,
    step_times: Sequence[str | Path] | None = None,
    at_size: bool = False,
) -> tuple[ConvergenceReport | None, str]:
    """From the metrics file(s): the measured steps to ``target`` per strategy and size, and
    the predicted time to accuracy per planned size (Markdown, "" without metrics): steps
    fitted at smaller sizes x the planner's step time, or x the step time measured in
    ``step_times`` where given (hardware efficiency from a stand-in cluster); with
    ``at_size``, steps measured at the planned size itself where the metrics hold runs
    there (:func:`gossipgrad.tools.plan.tta.tta_rows`)."""
    if metrics_path is None or target is None:
        return None, ""
    lines = read_lines(metrics_path)
    measured = measured_steps(lines, target)
    if step_times:
        ttas = tta_rows_measured(read_step_times(step_times), measured, at_size=at_size)
        source = "bench records: " + ", ".join(Path(p).name for p in step_times)
        return steps_to_target(lines, target), "\n" + render_tta(ttas, target, source) + "\n"
    ttas = tta_rows(rows, measured, {r.size for r in rows}, at_size=at_size)
    return steps_to_target(lines, target), "\n" + render_tta(ttas, target) + "\n"


def report_title(
    profile: Profile,
    network: NetworkFit,
    host: HostShare | None,
    compute_factor: float = 1.0,
    exchange_factor: Mapping[str, float] | None = None,
) -> str:
    """The report's first line: model, batch, device, network source, the host share when
    known (and its per-step costs without a spare core), and any in-step calibration."""
    title = (
        f"Plan for {profile.model} (batch {profile.batch_size} on {profile.device}), "
        f"network: {network.source}"
    )
    if host is not None:
        title += f"; {host.cores_per_rank:g} cores per rank"
        if not host.spare_core:
            title += (
                f" (no spare core: overlap {host.overlap_s * 1e6:.0f} us/step, "
                f"hand-off {host.handoff_s * 1e6:.0f} us/bucket, "
                f"staleness 1 {host.stale_s_per_byte * 1e9:.3g} ns/byte)"
            )
    if compute_factor != 1.0 or exchange_factor:
        title += f"; in-step calibration: compute x{compute_factor:g}" + "".join(
            f", {k} x{v:g}" for k, v in (exchange_factor or {}).items()
        )
    return title


def resolve_host(
    recorded: HostShare | None,
    cores: int | None = None,
    ranks_per_host: int | None = None,
    handoff_s: float | None = None,
    stale_s_per_byte: float | None = None,
    overlap_s: float | None = None,
) -> HostShare | None:
    """The host to plan for: ``recorded`` (the network file's) with each given field
    replacing its own. None when nothing is recorded or given (a spare core is assumed).

    >>> resolve_host(HostShare(2, 2, 1e-3), ranks_per_host=1)
    HostShare(cores=2, ranks_per_host=1, handoff_s=0.001, stale_s_per_byte=0.0, overlap_s=0.0)
    """
    given = {
        "cores": cores,
        "ranks_per_host": ranks_per_host,
        "handoff_s": handoff_s,
        "stale_s_per_byte": stale_s_per_byte,
        "overlap_s": overlap_s,
    }
    given = {k: v for k, v in given.items() if v is not None}
    if recorded is None:
        if not given:
            return None
        if "cores" not in given or "ranks_per_host" not in given:
            raise ValueError(
                "the network file has no 'host' record: give both --host-cores and "
                "--ranks-per-host (or no host option, to assume a spare core per rank)"
            )
        return HostShare(**given)
    return replace(recorded, **given)
