"""``python -m lab plan-validate``: measured step times of real configurations against
the planner's predictions, as JSON.

    mpiexec -n 2 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-2.json
    mpiexec -n 4 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-4.json
    python -m lab plan-validate --merge pv-2.json --merge pv-4.json
    python -m lab plan-validate --standin-runs 'runs/*.json' --networks 'net-*.json' \
        --calibrate-sizes 2,4 --calibrate-rate 1gbit --out standin.json  # lab.plan.standin
    python -m lab plan-validate --published lab/plan/data/published.json \
        --host-network net-1gbit-2.json --standin-calibration standin.json  # lab.plan.published
    mpiexec -n 8 python -m lab plan-validate --calibrate-size 2 --predict-sizes 4,8 \
        --out oos.json                                    # held out: lab.bench.plan_heldout

Parses the options, then runs :func:`lab.bench.plan_validate.measure_sizes` on every
rank (what it measures and predicts: :mod:`lab.bench.plan_validate`), or, without MPI,
scores ``--merge`` files (:func:`lab.bench.plan_score.merge`), the stand-in cluster's
launches held out (``--standin-runs``: :func:`lab.plan.standin_score.score`) or the
published configurations (``--published``: :func:`lab.plan.published.check`); rank 0
prints the JSON, writes it to ``--out`` and prints a summary on stderr.
"""

# Over 300 lines on purpose: one study's command line (measured, merged, stand-in, published).

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from gossipgrad.runtime import call_or_abort, init
from lab.bench.plan_heldout import load_calibration, measure_held_out
from lab.bench.plan_predict import Workload
from lab.bench.plan_score import merge, print_summary
from lab.bench.plan_validate import combined_report, measure_sizes, validation_configs


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def held_out_flags(
    sizes: str | None,
    calibrate_size: int | None,
    predict_sizes: str | None,
    calibration: str | None,
    calibrate_allreduce: bool,
) -> None:
    """Refuse held-out flags that do not go together (a usage error naming them)."""
    if predict_sizes and calibrate_allreduce:
        raise click.UsageError(
            "--calibrate-allreduce fits the ring to the launch's own "
            "allreduce: not with --predict-sizes (held out)"
        )
    if predict_sizes and sizes:
        raise click.UsageError(
            "--sizes scores each size in-sample; --predict-sizes holds sizes out: pass one of them"
        )
    if (calibrate_size or calibration) and not predict_sizes:
        raise click.UsageError(
            "--calibrate-size and --calibration need --predict-sizes "
            "(the sizes to hold out), e.g. --predict-sizes 4,8"
        )
    if predict_sizes and (calibrate_size is None) == (calibration is None):
        raise click.UsageError(
            "--predict-sizes needs exactly one of --calibrate-size N "
            "(calibrate in this launch) and --calibration FILE"
        )
    if calibrate_size and calibrate_size in [int(v) for v in _floats(predict_sizes or "")]:
        raise click.BadParameter(
            f"{calibrate_size} is the calibration size: its runs are in-sample, not held out",
            param_hint="--predict-sizes",
        )


def _emit(report: dict[str, Any], out: str | None) -> None:
    text = json.dumps(report, indent=1)
    if out:
        Path(out).write_text(text + "\n")
    click.echo(text)


def _standin(
    runs: tuple[str, ...],
    networks: tuple[str, ...],
    sizes: str,
    rate: str,
    refit: bool,
    without_in_flight: bool = False,
    frozen: str | None = None,
) -> dict:
    from gossipgrad.tools.devices.profile import StandinProfile
    from lab.plan.standin import StandinCalibration, load_networks, load_runs
    from lab.plan.standin_score import render_markdown, score, side_by_side

    if not networks:
        raise click.UsageError("--standin-runs needs --networks (netfit of each size and rate)")
    rows = load_runs(runs)
    profiles = {r.profile: StandinProfile.load(r.profile) for r in rows}
    cal = [int(v) for v in _floats(sizes)]
    try:
        nets = load_networks(networks, refit=refit)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if without_in_flight:  # the ablation: a queued allreduce priced like one alone
        nets = {k: (replace(n, allreduce_in_flight=None), doc) for k, (n, doc) in nets.items()}
    if not any(r.size in cal and r.rate == rate for r in rows):
        raise click.UsageError(
            f"no --standin-runs launch at sizes {sizes} on {rate} to calibrate on: add them "
            "(the stored ones: lab/records/data/standin-heldout/run-googlenet-{2,4}-1gbit.json"
            " with their net-{2,4}-1gbit.json)"
        )
    fixed = None
    if frozen:
        fixed = StandinCalibration.from_json(json.loads(Path(frozen).read_text())["calibration"])
        if list(fixed.sizes) != sorted(cal) or fixed.rate != rate:
            raise click.BadParameter(
                f"{frozen} was calibrated at sizes {list(fixed.sizes)} on {fixed.rate}, not "
                f"{sorted(cal)} on {rate}: pass its --calibrate-sizes and --calibrate-rate",
                param_hint="--standin-calibration",
            )
    report = score(rows, profiles, nets, cal, rate, fixed)
    batch = {name: p.batch_size for name, p in profiles.items()}
    report["side_by_side"] = side_by_side(rows, batch)
    report["markdown"] = render_markdown(report, report["side_by_side"])
    h = report["held_out"]
    click.echo(
        f"held out: MAPE {h['mape_pct']} %, worst {h['worst_pct']} %, median tau "
        f"{h['median_tau']}, max regret {h['max_regret']} ({h['n']} rows)",
        err=True,
    )
    return report


def _published(path: str, host_network: str | None, calibration: str | None) -> dict:
    from lab.plan.published import check, load

    if host_network is None:
        raise click.UsageError("--published needs --host-network (this host's netfit)")
    c = load(calibration)["calibration"]["interference"] if calibration else 0.0
    report = check(load(path), load(host_network), c)
    click.echo(
        f"published: {report['n']} configurations from {report['papers']} sources, median "
        f"|error| {report['median_abs_error_pct']} %, worst {report['worst_abs_error_pct']} %, "
        f"above {report['share_above']:.0%}, below {report['share_below']:.0%}",
        err=True,
    )
    return report


@click.command("plan-validate")
@click.option("--arch", default="mlp", show_default=True)
@click.option("--hidden", type=int, default=1024, show_default=True)
@click.option("--batch-size", "-b", type=int, default=32, show_default=True)
@click.option("--strategies", default="gossip,allreduce", show_default=True)
@click.option(
    "--bucket-mb",
    default="0.25,1,4,25",
    show_default=True,
    help="Bucket caps (MiB), comma-separated.",
)
@click.option(
    "--staleness",
    default="0",
    show_default=True,
    help="Staleness values for the overlapped configs, e.g. 0,1.",
)
@click.option("--only-overlap", is_flag=True, help="Skip the no-overlap and mix=param configs.")
@click.option(
    "--steps",
    type=click.IntRange(1),
    default=30,
    show_default=True,
    help="Timed steps per configuration, split between the passes.",
)
@click.option(
    "--warmup",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Untimed steps before each run (each pass of each configuration).",
)
@click.option(
    "--passes",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Measure the configurations in this many passes, the order reversed "
    "every other pass, --steps split between them, the calibration rounds "
    "before each (evens out and follows the host's drift).",
)
@click.option("--profile-steps", type=int, default=20, show_default=True)
@click.option("--net-max-mb", type=float, default=16.0, show_default=True)
@click.option("--net-reps", type=int, default=5, show_default=True)
@click.option("--calibrate-allreduce", is_flag=True)
@click.option(
    "--calibrate-mb",
    type=float,
    default=None,
    help="Bucket cap (MiB) of the in-step calibration runs (default: the smallest --bucket-mb).",
)
@click.option(
    "--calibrate-pairs",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Rounds before each pass (compute-only, blocking, overlapped s0, s1) per "
    "strategy for the in-step calibration.",
)
@click.option(
    "--calibrate-steps",
    type=click.IntRange(1),
    default=15,
    show_default=True,
    help="Timed steps of each calibration run. Shorter runs "
    "and more --calibrate-pairs average out run-to-run noise better.",
)
@click.option(
    "--confirm-rounds",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Re-run the model's choice and the fastest measured configuration this "
    "many times each for the regret (0: first-pass regret only).",
)
@click.option(
    "--sizes",
    default=None,
    help="Ranks to validate at, comma-separated, each 2..launched size (default: "
    "the launched size). Smaller sizes run on the first ranks; the rest wait.",
)
@click.option(
    "--calibrate-size",
    type=click.IntRange(2),
    default=None,
    help="Held out: calibrate (and score in-sample) at this size only, on the first "
    "ranks, then predict --predict-sizes from that calibration, frozen.",
)
@click.option(
    "--predict-sizes",
    default=None,
    help="Held out: sizes to predict and measure, comma-separated, each 2..launched "
    "size (launch at the largest), none the calibration's own.",
)
@click.option(
    "--calibration",
    "calibration_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Held out: the frozen calibration of an earlier held-out launch's --out "
    "(say, on loopback) instead of --calibrate-size; this launch profiles and "
    "fits its own link, then predicts --predict-sizes.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the JSON here (rank 0).",
)
@click.option(
    "--merge",
    "merge_paths",
    multiple=True,
    type=click.Path(exists=True),
    help="No MPI: score these --out files together and print the JSON.",
)
@click.option(
    "--standin-runs",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="No MPI: bench strategies --device standin records (one per launch) to calibrate "
    "on and hold out (with --networks).",
)
@click.option(
    "--networks",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="netfit documents of the emulated links, one per size and rate.",
)
@click.option(
    "--refit-networks",
    is_flag=True,
    help="With --networks: recompute each netfit's fits from its recorded times first "
    "(what gossipgrad netfit --refit does), for networks measured before the fit changed.",
)
@click.option(
    "--without-in-flight",
    is_flag=True,
    help="With --networks: ignore each netfit's allreduce-in-flight fit (a queued allreduce "
    "bucket priced like one alone), to see what that term changes.",
)
@click.option(
    "--calibrate-sizes",
    default="2,4",
    show_default=True,
    help="With --standin-runs: the sizes calibrated on (at --calibrate-rate).",
)
@click.option(
    "--calibrate-rate",
    default="1gbit",
    show_default=True,
    help="With --standin-runs: the emulated rate calibrated on.",
)
@click.option(
    "--published",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="No MPI: predict the published configurations of this file (with --host-network).",
)
@click.option(
    "--host-network",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="With --published: this host's netfit of an emulated link (its link efficiency).",
)
@click.option(
    "--standin-calibration",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A --standin-runs --out file. With --published: its interference coefficient; "
    "with --standin-runs: its calibration, frozen, instead of fitting the same one again.",
)
# Over 60 lines on purpose: a click command: its parameters, their checks, then one call per mode.
def plan_validate(
    arch: str,
    hidden: int,
    batch_size: int,
    strategies: str,
    bucket_mb: str,
    staleness: str,
    only_overlap: bool,
    steps: int,
    warmup: int,
    passes: int,
    profile_steps: int,
    net_max_mb: float,
    net_reps: int,
    calibrate_allreduce: bool,
    calibrate_mb: float | None,
    calibrate_pairs: int,
    calibrate_steps: int,
    confirm_rounds: int,
    sizes: str | None,
    calibrate_size: int | None,
    predict_sizes: str | None,
    calibration_path: str | None,
    out: str | None,
    merge_paths: tuple[str, ...],
    standin_runs: tuple[str, ...],
    networks: tuple[str, ...],
    refit_networks: bool,
    without_in_flight: bool,
    calibrate_sizes: str,
    calibrate_rate: str,
    published: str | None,
    host_network: str | None,
    standin_calibration: str | None,
) -> None:
    """Measured step times of real configurations vs the planner's predictions (JSON)."""
    if merge_paths:
        _emit(merge(merge_paths), out)
        return
    if standin_runs:
        report = _standin(
            standin_runs,
            networks,
            calibrate_sizes,
            calibrate_rate,
            refit_networks,
            without_in_flight,
            standin_calibration,
        )
        _emit(report, out)
        return
    if published:
        _emit(_published(published, host_network, standin_calibration), out)
        return
    held_out_flags(sizes, calibrate_size, predict_sizes, calibration_path, calibrate_allreduce)
    calibration = None
    if calibration_path:
        try:
            calibration = load_calibration(
                calibration_path, Workload(arch, hidden, batch_size, steps, warmup)
            )
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--calibration") from None
    comm = init()
    logging.getLogger("gossipgrad").setLevel(logging.WARNING)
    if comm.size < 2:
        raise click.UsageError("plan-validate needs >= 2 ranks: mpiexec -n 2 ...")
    listed = predict_sizes or sizes
    at = [int(v) for v in _floats(listed)] if listed else [comm.size]
    checked = at + ([calibrate_size] if calibrate_size else [])
    if not at or any(not 2 <= n <= comm.size for n in checked):
        hint = "--predict-sizes/--calibrate-size" if predict_sizes else "--sizes"
        raise click.BadParameter(
            f"each size must be in 2..{comm.size} (the launched size: "
            f"launch at the largest), got {listed!r}"
            + (f" and {calibrate_size}" if calibrate_size else ""),
            param_hint=hint,
        )
    configs = validation_configs(
        strategies.split(","),
        _floats(bucket_mb),
        [int(v) for v in _floats(staleness)],
        only_overlap,
    )
    kw = dict(
        arch=arch,
        hidden=hidden,
        batch_size=batch_size,
        configs=configs,
        steps=steps,
        warmup=warmup,
        profile_steps=profile_steps,
        net_max_mb=net_max_mb,
        net_reps=net_reps,
        calibrate_allreduce=calibrate_allreduce,
        calibrate_mb=calibrate_mb,
        calibrate_pairs=calibrate_pairs,
        calibrate_steps=calibrate_steps,
        confirm_rounds=confirm_rounds,
        passes=passes,
    )
    if predict_sizes:
        report = call_or_abort(
            comm,
            lambda c: measure_held_out(
                c, calibrate_size=calibrate_size, predict_sizes=at, calibration=calibration, **kw
            ),
        )
        if comm.rank == 0:
            _emit(report, out)
            print_summary(report, report["launches"])
        return
    # A rank that fails ends the job: the others would wait for it in a collective.
    reports = call_or_abort(comm, lambda c: measure_sizes(c, at, **kw))
    if comm.rank == 0:
        report = combined_report(reports)
        _emit(report, out)
        print_summary(report, reports)
