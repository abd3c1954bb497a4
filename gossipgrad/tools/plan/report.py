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

from gossipgrad.registry import CODECS
from gossipgrad.tools.plan.calibrate import scale_exchange, scale_profile
from gossipgrad.tools.plan.convergence import ConvergenceReport, read_lines, steps_to_target
from gossipgrad.tools.plan.formats import NetworkFit, Profile
from gossipgrad.tools.plan.host import HostShare
from gossipgrad.tools.plan.model import CommModel, on_the_wire, pattern_of
from gossipgrad.tools.plan.planner import (
    DEFAULT_BUCKET_MB,
    DEFAULT_STRATEGIES,
    DEFAULT_TIE_TOLERANCE,
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
def plan_report(
    profile_path: str | Path,
    network_path: str | Path,
    *,
    sizes: Iterable[int],
    strategies: Iterable[str] = DEFAULT_STRATEGIES,
    bucket_mb: Iterable[float] = DEFAULT_BUCKET_MB,
    staleness: Iterable[int] = (0, 1),
    overlap: bool = True,
    duplex: float = 1.0,
    calibrate_allreduce: bool = False,
    device_memory_bytes: int | None = None,
    optimizer_state_factor: float = 1.0,
    metrics_path: str | Path | Sequence[str | Path] | None = None,
    target_accuracy: float | None = None,
    png_path: str | Path | None = None,
    all_rows: bool = False,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    host_cores: int | None = None,
    ranks_per_host: int | None = None,
    handoff_s: float | None = None,
    stale_s_per_byte: float | None = None,
    overlap_s: float | None = None,
    compute_factor: float = 1.0,
    exchange_factor: Mapping[str, float] | None = None,
    mix: str = "grad",
    sufficient_factors: str = "off",
    fabric: Mapping[str, object] | None = None,
    interference: float = 0.0,
    step_times: Sequence[str | Path] | None = None,
    wire: str = "fp32",
    ps_split: bool = True,
    steps_at_size: bool = False,
) -> str:
    """Load the profile and network fit, predict every configuration, and return the
    markdown report; also writes a PNG when ``png_path`` is given. ``metrics_path`` (one
    file or several) and ``target_accuracy`` go together: measured steps to that accuracy
    per strategy and size, and the predicted time to it (:mod:`gossipgrad.tools.plan.tta`).
    ``host_cores``, ``ranks_per_host``, ``handoff_s``, ``stale_s_per_byte``, ``overlap_s``
    override the network file's ``host`` record field by field (see ``resolve_host``).
    ``compute_factor`` and ``exchange_factor`` (strategy -> factor) are the in-step
    calibration (:mod:`gossipgrad.tools.plan.calibrate`; ``lab plan-validate``'s ``calibration``).
    ``mix``, ``sufficient_factors``: what gossip mixes, whether Linear layers go as factors.
    ``fabric``: fields of :class:`~gossipgrad.tools.plan.fabric.Fabric` for the cluster planned
    (ranks per node, intra-node link, hierarchical), over what the network file measured;
    ``interference``: compute seconds added per second of communication beside it.
    ``step_times``: ``bench strategies`` records whose measured step times replace the
    planner's in the time-to-accuracy table (:func:`~gossipgrad.tools.plan.tta.read_step_times`).
    ``wire``: the wire codec every bucket goes through (:func:`codec_on_the_wire`,
    :func:`~gossipgrad.tools.plan.model.on_the_wire`). ``ps_split``: a parameter server splits a
    parameter larger than a server's share across owners (an elementwise optimizer's; False:
    on one owner, as with any other optimizer). ``steps_at_size``: the time to accuracy
    takes the steps measured at a planned size where the metrics hold runs there (pilot
    runs of other seeds) instead of the fit from smaller sizes."""
    if (metrics_path is None) != (target_accuracy is None):
        raise ValueError(
            "metrics_path and target_accuracy must be given together "
            "(--metrics FILE --target-accuracy X)"
        )
    if steps_at_size and metrics_path is None:
        raise ValueError(
            "--steps-at-size reads steps from --metrics: give --metrics FILE (runs at the "
            "planned size) and --target-accuracy X"
        )
    strategies = list(strategies)
    profile = scale_profile(Profile.load(profile_path), compute_factor)
    network = NetworkFit.load(network_path)
    model = CommModel.from_network(network, duplex=duplex, calibrate_allreduce=calibrate_allreduce)
    model = replace(
        model, fabric=replace(model.fabric, **dict(fabric or {})), interference=interference
    )
    for strategy, factor in (exchange_factor or {}).items():
        model = scale_exchange(model, strategy, factor)
    refused = {}
    if wire != "fp32":
        model = codec_on_the_wire(model, wire)
        strategies, refused = strategies_taking(strategies, wire)
    host = resolve_host(
        network.host, host_cores, ranks_per_host, handoff_s, stale_s_per_byte, overlap_s
    )
    rows = plan(
        profile,
        model,
        sizes=sizes,
        strategies=strategies,
        bucket_mb=bucket_mb,
        staleness=staleness,
        overlap=overlap,
        device_memory_bytes=device_memory_bytes,
        optimizer_state_factor=optimizer_state_factor,
        host=host,
        mix=mix,
        sufficient_factors=sufficient_factors,
        ps_split=ps_split,
        wire_feedback=bool(getattr(CODECS.get(wire), "feedback_default", False)),
    )
    convergence, tta = metrics_sections(
        rows, metrics_path, target_accuracy, step_times, at_size=steps_at_size
    )
    title = report_title(profile, network, host, compute_factor, exchange_factor)
    if wire != "fp32":
        title += f"; wire {wire} ({model.wire_ratio:.3g}x the bytes)"
        if refused:
            title += f"; left out (not with {wire}): {', '.join(refused)}"
    if not ps_split and any(pattern_of(s) == "server" for s in strategies):
        title += "; ps keeps every parameter on one owner (--ps-whole)"
    if png_path is not None:
        plot_png(rows, png_path, title=f"{profile.model}: predicted efficiency")
    verdict = cannot_help(rows, profile.local_step_s, link_gbit(model.beta_s_per_byte))
    return (
        render_markdown(
            rows,
            title=title,
            convergence=convergence,
            all_rows=all_rows,
            tie_tolerance=tie_tolerance,
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
        why = None if pattern_of(name) == "none" else wire_refusal(name, wire)
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
