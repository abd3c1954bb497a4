"""``python -m lab tta-product OUTDIR``: score lab/tta_product.sh's launches
(lab.bench.tta_product): JSON on stdout, a Markdown table with --markdown."""

from __future__ import annotations

import json

import click


@click.command("tta-product")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--markdown", "md", type=click.Path(dir_okay=False), default=None)
@click.option(
    "--steps-from",
    type=click.Path(exists=True, file_okay=False),
    multiple=True,
    help="Take the steps at 8 ranks from this launch directory (another seed's "
    "lab/tta_product.sh; repeat it for the mean of several) instead of fitting sizes 1, 2 "
    "and 4.",
)
def tta_product(out_dir: str, md: str | None, steps_from: tuple[str, ...]) -> None:
    """Predicted (steps at 1, 2, 4 ranks, or at 8 in another launch, x a short launch's
    step) against measured seconds to the target at 8 ranks."""
    from lab.bench.tta_product import markdown, score

    try:
        report = score(out_dir, steps_from=steps_from)
    except (OSError, ValueError, KeyError) as exc:
        raise click.ClickException(str(exc)) from exc
    if md:
        with open(md, "w", encoding="utf-8") as f:
            f.write(markdown(report))
    click.echo(json.dumps(report, indent=2))
