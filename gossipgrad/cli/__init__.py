"""Command line: ``gossipgrad train``, ``schedule``, ``profile``, ``netfit``, ``plan``,
``bench``. Plugins (``GOSSIPGRAD_PLUGINS``) are imported first, so what they register is a
choice of every command."""

from __future__ import annotations

import sys

import click

from gossipgrad.choices import use_cli_names
from gossipgrad.cli.plugins import load_plugins

try:
    load_plugins()
except ValueError as exc:
    click.echo(f"Error: {exc}", err=True)
    sys.exit(2)

from gossipgrad.cli.bench import bench  # noqa: E402 - after the plugins
from gossipgrad.cli.netfit import netfit  # noqa: E402
from gossipgrad.cli.plan import plan  # noqa: E402
from gossipgrad.cli.profile import profile  # noqa: E402
from gossipgrad.cli.schedule import schedule  # noqa: E402
from gossipgrad.cli.train import train  # noqa: E402


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="gossipgrad")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Decentralized data-parallel training for PyTorch over MPI (GossipGraD).

    Launch with mpiexec/mpirun or srun, e.g. ``mpiexec -n 4 gossipgrad train``;
    run without a launcher for a single rank.
    """
    use_cli_names()  # messages name flags, not keyword arguments, while a command runs
    ctx.call_on_close(lambda: use_cli_names(False))


main.add_command(train)
main.add_command(schedule)
main.add_command(profile)
main.add_command(netfit)
main.add_command(plan)
main.add_command(bench)
