"""Command line: ``gossipgrad train``, ``schedule``, ``profile``, ``netfit``, ``plan``,
``bench``. Plugins (``GOSSIPGRAD_PLUGINS``) are imported first, so what they register is a
choice of every command."""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

import click

from gossipgrad.choices import use_cli_names
from gossipgrad.cli.plugins import load_plugins
from gossipgrad.runtime import launch_rank

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


class OneVoice(click.Group):
    """Help and usage errors once per job: every rank parses the same command line, so
    ranks other than 0 (as the launcher numbers them) print neither; exit codes are kept."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if launch_rank() == 0:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        quiet = contextlib.redirect_stdout(io.StringIO()) if _asks_help() else _nothing()
        try:
            with quiet:
                return super().main(*args, **kwargs)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.ClickException as exc:  # rank 0 says it
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            sys.exit(1)


def _asks_help() -> bool:
    return bool({"-h", "--help"} & set(sys.argv[1:]))


@contextlib.contextmanager
def _nothing() -> Any:
    yield


@click.group(
    cls=OneVoice,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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
