"""``python -m lab tta-product OUTDIR [OUTDIR ...]``: score lab/tta_product.sh's launches
(lab.bench.tta_product): JSON on stdout, a Markdown table with --markdown."""

from __future__ import annotations

import json

import click


@click.command("tta-product")
@click.argument("out_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--markdown", "md", type=click.Path(dir_okay=False), default=None)
@click.option(
    "--steps-from",
    type=click.Path(exists=True, file_okay=False),
    multiple=True,
    help="Take the steps at 8 ranks from this launch directory (another seed's "
    "lab/tta_product.sh; repeat it for the mean of several) instead of fitting sizes 1, 2 "
    "and 4.",
)
@click.option(
    "--steps-for",
    type=(str, click.Path(exists=True)),
    multiple=True,
    metavar="CONTENDER PATH",
    help="Take CONTENDER's steps from PATH instead (a launch directory or a 'bench tta' "
    "JSON record at that size; repeat it for the mean of several).",
)
def tta_product(
    out_dirs: tuple[str, ...],
    md: str | None,
    steps_from: tuple[str, ...],
    steps_for: tuple[tuple[str, str], ...],
) -> None:
    """Predicted (steps at 1, 2, 4 ranks, or at 8 in another launch, x a short launch's
    step) against measured seconds to the target at 8 ranks; with several OUTDIRs (other
    seeds of one job), their mean against the mean prediction."""
    from lab.bench.tta_product import markdown, score, score_mean

    fixed: dict[str, list[str]] = {}
    for name, path in steps_for:
        fixed.setdefault(name, []).append(path)
    try:
        if len(out_dirs) == 1:
            report = score(out_dirs[0], steps_from=steps_from, steps_for=fixed)
        else:
            report = score_mean(out_dirs, steps_from=steps_from, steps_for=fixed)
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    if md:
        with open(md, "w", encoding="utf-8") as f:
            f.write(markdown(report))
    click.echo(json.dumps(report, indent=2))
