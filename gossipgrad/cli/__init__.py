"""Command line: ``gossipgrad train``, ``schedule``, ``profile``, ``netfit``, ``plan``."""

from __future__ import annotations

import click

from gossipgrad.cli.bench import bench
from gossipgrad.cli.netfit import netfit
from gossipgrad.cli.plan import plan
from gossipgrad.cli.profile import profile
from gossipgrad.cli.schedule import schedule
from gossipgrad.cli.train import train


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gossipgrad")
def main() -> None:
    """Decentralized data-parallel training for PyTorch over MPI (GossipGraD).

    Launch with mpiexec/mpirun or srun, e.g. ``mpiexec -n 4 gossipgrad train``;
    run without a launcher for a single rank.
    """


main.add_command(train)
main.add_command(schedule)
main.add_command(profile)
main.add_command(netfit)
main.add_command(plan)
main.add_command(bench)
