"""``gossipgrad plan``: profile + network fit -> predicted throughput per configuration.

    gossipgrad plan --profile profile.json --network network.json --sizes 16,64,256 --png p.png
    gossipgrad plan --profile p.json --network n.json --sizes 8 \
        --metrics tta-1.jsonl,tta-2.jsonl,tta-4.jsonl --target-accuracy 0.9

Parses and validates, then calls :func:`gossipgrad.tools.plan.report.plan_report`. Step times
are throughput predictions; with ``--metrics`` from runs at smaller sizes it also predicts
steps to the target (:mod:`gossipgrad.tools.plan.steps`) and time to accuracy
(:mod:`gossipgrad.tools.plan.tta`).
"""

# Over 300 lines on purpose: the planner's command line is mostly option declarations; the logic
# lives in gossipgrad/tools/plan/.

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gossipgrad.cli.output import write_output
from gossipgrad.registry import CODECS
from gossipgrad.tools.cli.output import output_file
from gossipgrad.tools.measure.refit import load_document, stale_fit
from gossipgrad.tools.plan.model import parse_strategy
from gossipgrad.tools.plan.options import PlanOptions
from gossipgrad.tools.plan.report import plan_report


def _numbers(kind: Callable[[str], Any], option: str) -> Callable:
    def parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        try:
            items = [kind(v.strip()) for v in value.split(",") if v.strip()]
        except ValueError:
            raise click.BadParameter(
                f"expected a comma-separated list, got {value!r}", param_hint=option
            ) from None
        if not items:
            raise click.BadParameter("must not be empty", param_hint=option)
        return items

    return parse


def _factors(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict:
    """``("gossip=3.2", "allreduce=2")`` -> ``{"gossip": 3.2, "allreduce": 2.0}``."""
    out = {}
    for text in values:
        name, sep, number = text.partition("=")
        try:
            factor = float(number)
            strategy = parse_strategy(name.strip())
        except ValueError as exc:
            raise click.BadParameter(
                f"expected STRATEGY=X, e.g. gossip=3.2, got {text!r} ({exc})",
                param_hint="--exchange-factor",
            ) from None
        if not sep or not factor > 0 or factor == float("inf"):
            raise click.BadParameter(
                f"expected STRATEGY=X with X > 0, got {text!r}", param_hint="--exchange-factor"
            )
        out[strategy] = factor
    return out


def _fabric(ranks_per_node: int | None, intra_gbps: float | None, hierarchical: bool) -> dict:
    """The Fabric fields the flags set (the rest are the network file's)."""
    out: dict[str, Any] = {"hierarchical": hierarchical}
    if ranks_per_node is not None:
        out["ranks_per_node"] = ranks_per_node
    if intra_gbps is not None:
        out["intra_beta_s_per_byte"] = 1 / (intra_gbps * 1e9)
    return out


@click.command(name="plan")
@click.option(
    "--profile",
    "profile_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="From gossipgrad profile.",
)
@click.option(
    "--network",
    "network_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="From gossipgrad netfit.",
)
@click.option(
    "--sizes",
    required=True,
    callback=_numbers(int, "--sizes"),
    help="Ranks to predict, e.g. 2,4,8,16.",
)
@click.option(
    "--strategies",
    default="gossip,allreduce",
    show_default=True,
    callback=_numbers(str, "--strategies"),
)
@click.option(
    "--bucket-mb",
    default="1,4,25,100",
    show_default=True,
    callback=_numbers(float, "--bucket-mb"),
    help="Bucket caps to try (MiB).",
)
@click.option(
    "--staleness", default="0,1", show_default=True, callback=_numbers(int, "--staleness")
)
@click.option("--overlap/--no-overlap", default=True, show_default=True)
@click.option(
    "--duplex",
    type=click.FloatRange(1, 2),
    default=1.0,
    show_default=True,
    help="1 = full-duplex links; 2 = send and receive share the link.",
)
@click.option(
    "--calibrate-allreduce",
    is_flag=True,
    help="Scale the ring model by the network file's measured allreduce fit (and, where it "
    "has one, price an allreduce bucket queued behind another by its in-flight fit).",
)
@click.option(
    "--host-cores",
    type=click.IntRange(min=1),
    default=None,
    help="Cores each rank may run on (default: the network file's 'host' record).",
)
@click.option(
    "--ranks-per-host",
    type=click.IntRange(min=1),
    default=None,
    help="Ranks per host (default: the network file's 'host' record). Below 2 cores per "
    "rank, overlap cannot hide communication.",
)
@click.option(
    "--handoff-us",
    type=click.FloatRange(min=0),
    default=None,
    help="Extra microseconds per bucket of an overlapped exchange without a spare core "
    "(lab plan-validate's 'host.handoff_s'; default: the network file's, else 0).",
)
@click.option(
    "--overlap-us",
    type=click.FloatRange(min=0),
    default=None,
    help="Extra microseconds per overlapped step without a spare core (lab plan-validate's "
    "'host.overlap_s' x 1e6; default: the network file's, else 0).",
)
@click.option(
    "--stale-ns-per-byte",
    type=float,
    default=None,
    help="Extra nanoseconds per gradient byte of a staleness-1 step without a spare "
    "core, negative where staleness 1 hides part of the exchange (lab plan-validate's "
    "'host.stale_s_per_byte' x 1e9; default: the network file's, else 0).",
)
@click.option(
    "--compute-factor",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply the profile's compute times (lab plan-validate's 'calibration.compute_factor').",
)
@click.option(
    "--exchange-factor",
    multiple=True,
    callback=_factors,
    metavar="STRATEGY=X",
    help="Multiply that strategy's bucket costs (lab plan-validate's "
    "'calibration.exchange_factor'); repeat per strategy, e.g. gossip=3.2.",
)
@click.option(
    "--device-memory-gb",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Check each configuration against this much device memory (GB).",
)
@click.option(
    "--optimizer-state-factor",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Optimizer state as a multiple of the parameters.",
)
@click.option(
    "--metrics",
    default=None,
    callback=_numbers(str, "--metrics"),
    metavar="FILE[,FILE...]",
    help="Metrics JSONL (gossipgrad train or bench tta --metrics-out): measured steps to "
    "--target-accuracy per strategy and size, and, from runs at two or more smaller "
    "sizes, the predicted time to accuracy (steps x step time).",
)
@click.option("--target-accuracy", type=click.FloatRange(0, 1), default=None)
@click.option(
    "--step-times",
    default=None,
    callback=_numbers(str, "--step-times"),
    metavar="FILE[,FILE...]",
    help="bench strategies JSON records (a stand-in cluster's: their undilated step "
    "times) or bench tta records (their mean training step): with --metrics, time to "
    "accuracy = predicted steps x these measured step times instead of the planner's.",
)
@click.option(
    "--steps-at-size",
    is_flag=True,
    help="With --metrics that hold runs at a planned size itself (other seeds' pilot "
    "runs), time to accuracy takes their mean steps there instead of the fit from smaller "
    "sizes (seeds vary by about 9 %: docs/planner.md).",
)
@click.option(
    "--mix",
    type=click.Choice(["grad", "param"]),
    default="grad",
    show_default=True,
    help="What gossip mixes: grad exchanges during backward, param after the optimizer "
    "(forward waits for each bucket).",
)
@click.option(
    "--sufficient-factors",
    type=click.Choice(["off", "auto", "on"]),
    default="off",
    show_default=True,
    help="Send the profile's Linear layers ('linear' in the profile) as factors where the "
    "runtime would.",
)
@click.option(
    "--ranks-per-node",
    type=click.IntRange(min=1),
    default=None,
    help="Ranks sharing one network interface in the cluster planned (default: the network "
    "file's).",
)
@click.option(
    "--intra-gbps",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="GB/s between two ranks of one node (NVLink, PCIe; default: as between nodes).",
)
@click.option(
    "--hierarchical/--flat",
    default=False,
    show_default=True,
    help="Allreduce within nodes, across nodes, then within again (Horovod's hierarchical "
    "allreduce) instead of one ring through every rank.",
)
@click.option(
    "--interference",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Compute seconds added per second of communication running beside it.",
)
@click.option(
    "--wire",
    type=click.Choice(CODECS.names()),
    default="fp32",
    show_default=True,
    help="Wire codec every bucket goes through (as train --wire): bf16 and fp16 put half "
    "the bytes on the wire, fp8 a quarter; encoding time is not priced.",
)
@click.option(
    "--ps-split/--ps-whole",
    default=True,
    show_default=True,
    help="How ps holds a parameter larger than a server's share: split across owners (what "
    "it does with SGD, Adam and other optimizers that update each element on its own) or "
    "whole on one owner (what it does with any other optimizer, e.g. LARS or LAMB).",
)
@output_file("--png", "Also plot predicted efficiency vs size here.")
@click.option("--all-rows", is_flag=True, help="List every configuration, not only the best.")
@output_file("--out", "Write the markdown here (default: stdout).")
# Over 60 lines on purpose: a click command: its parameters and their checks, then one call.
def plan(
    profile_path: str,
    network_path: str,
    sizes: list[int],
    strategies: list[str],
    bucket_mb: list[float],
    staleness: list[int],
    overlap: bool,
    duplex: float,
    calibrate_allreduce: bool,
    host_cores: int | None,
    ranks_per_host: int | None,
    handoff_us: float | None,
    overlap_us: float | None,
    stale_ns_per_byte: float | None,
    compute_factor: float,
    exchange_factor: dict[str, float],
    device_memory_gb: float | None,
    optimizer_state_factor: float,
    metrics: list[str] | None,
    target_accuracy: float | None,
    step_times: list[str] | None,
    steps_at_size: bool,
    mix: str,
    sufficient_factors: str,
    ranks_per_node: int | None,
    intra_gbps: float | None,
    hierarchical: bool,
    interference: float,
    wire: str,
    ps_split: bool,
    png: str | None,
    all_rows: bool,
    out: str | None,
) -> None:
    """Predict step time and throughput per size, strategy, bucket size and staleness, and
    recommend one configuration per size. With --metrics from runs at smaller sizes, also
    predict steps to --target-accuracy and recommend by time to accuracy."""
    _warn_stale_network(network_path)
    try:
        options = PlanOptions(
            profile_path,
            network_path,
            sizes=sizes,
            strategies=strategies,
            bucket_mb=bucket_mb,
            staleness=staleness,
            overlap=overlap,
            duplex=duplex,
            calibrate_allreduce=calibrate_allreduce,
            device_memory_bytes=None if device_memory_gb is None else int(device_memory_gb * 1e9),
            optimizer_state_factor=optimizer_state_factor,
            metrics_path=metrics,
            target_accuracy=target_accuracy,
            png_path=png,
            all_rows=all_rows,
            host_cores=host_cores,
            ranks_per_host=ranks_per_host,
            handoff_s=None if handoff_us is None else handoff_us * 1e-6,
            stale_s_per_byte=None if stale_ns_per_byte is None else stale_ns_per_byte * 1e-9,
            overlap_s=None if overlap_us is None else overlap_us * 1e-6,
            compute_factor=compute_factor,
            exchange_factor=exchange_factor,
            mix=mix,
            sufficient_factors=sufficient_factors,
            fabric=_fabric(ranks_per_node, intra_gbps, hierarchical),
            interference=interference,
            step_times=step_times,
            wire=wire,
            ps_split=ps_split,
            steps_at_size=steps_at_size,
        )
        text = plan_report(options)
    except (ValueError, OSError, ImportError) as exc:
        raise click.ClickException(str(exc)) from exc
    write_output(text, out)
    if out is not None:
        click.echo(f"wrote {out}" + (f" and {png}" if png else ""), err=True)
    click.echo(
        "note: step times are throughput predictions only; time to accuracy needs "
        "--metrics runs at smaller sizes (or at the size itself, with --steps-at-size)",
        err=True,
    )


def _warn_stale_network(path: str) -> None:
    """Say so when the network file's fit disagrees with its own recorded times (an older
    netfit's fit); a file that does not parse is left to plan_report's error."""
    try:
        message = stale_fit(load_document(path), path)
    except (OSError, ValueError):
        return
    if message:
        click.echo(f"warning: {message}", err=True)
