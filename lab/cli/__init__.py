"""``python -m lab``: the lab's commands, one click group.

    python -m lab --help
    mpiexec -n 2 python -m lab plan-validate --arch mlp --hidden 1024 --out pv-2.json
    mpiexec -n 8 python -m lab stragglers --markdown stragglers.md
    python -m lab sweep --sizes 8 --mixes grad,param     # launches mpiexec itself

Studies with options of their own (``plan-validate``, ``stragglers``, ``ps-lag``,
``convergence``, ``codecs``, ``tta-product``) are click commands; the drivers in
:mod:`lab.studies` keep their argparse options and get the rest of the command line
(``python -m lab sweep --help``).
"""

from __future__ import annotations

import importlib
import sys

import click

from lab.cli.codecs import codecs
from lab.cli.convergence import convergence
from lab.cli.plan_validate import plan_validate
from lab.cli.ps_lag import ps_lag
from lab.cli.stragglers import stragglers
from lab.cli.tta_product import tta_product

#: ``python -m lab NAME ARGS``: the ``main(argv)`` of ``lab.studies.MODULE``, and what it does.
STUDIES = {
    "sweep": ("sweep", "gossipgrad train over sizes x strategies x mixes: a table and JSON."),
    "compare-losses": ("compare_losses", "Per-step training loss of two metrics files."),
    "project-imagenet": (
        "project_imagenet",
        "PREDICTED ResNet-50/GoogLeNet scaling, 16..1024 GPUs (synthetic profiles).",
    ),
    "failure": ("failure_bench", "Ranks killed mid-run under ULFM vs no kill: JSON."),
    "failure-cost": (
        "failure_cost",
        "--on-failure continue vs abort per step, nothing failing, alternated (under mpiexec).",
    ),
    "soak": ("soak", "A long train run; each rank's memory, threads and files recorded."),
    "templates-check": (
        "templates_check",
        "Is a built-in dataset learnable by the MLP and not by a linear model?",
    ),
    "optimizers": (
        "optimizers",
        "SGD-Nesterov, Adam, AdamW: gossip vs gradient-averaging allreduce (markdown, JSON).",
    ),
    "mpi-probe": ("mpi_probe", "Transport probes: duplex rate, polling, allreduce (mpi4py)."),
    "scale-efficiency": (
        "scale_efficiency",
        "Simulated statistical efficiency, 8..1024 ranks: steps to a target, accuracy (JSON).",
    ),
    "scale-jitter": (
        "scale_jitter",
        "Simulated step time vs ranks under 5 % noise or a 2x straggler (clock only, JSON).",
    ),
    "scale-clock-check": (
        "scale_clock_check",
        "The simulator's clock against 8-rank emulated-cluster launches with a straggler.",
    ),
    "many-ranks": (
        "many_ranks",
        "gossipgrad train at 16, 32 ... real ranks: start-up, memory, bytes, resume, a stop.",
    ),
}


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
def lab() -> None:
    """The lab: studies that validate gossipgrad's own claims (not installed; run from the
    root of a checkout). What a user runs on a cluster is `gossipgrad --help`."""


def study(name: str, module: str, summary: str) -> click.Command:
    """A command that hands everything after NAME to ``lab.studies.MODULE.main``."""

    @click.command(
        name,
        help=f"{summary} Options: python -m lab {name} --help.",
        context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def command(args: tuple[str, ...]) -> None:
        code = importlib.import_module(f"lab.studies.{module}").main(list(args))
        sys.exit(code or 0)

    return command


for _command in (plan_validate, stragglers, ps_lag, convergence, codecs, tta_product):
    lab.add_command(_command)
for _name, (_module, _summary) in STUDIES.items():
    lab.add_command(study(_name, _module, _summary))


def main() -> None:
    lab(prog_name="python -m lab")
