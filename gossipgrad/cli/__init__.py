"""Command line: ``gossipgrad train`` and ``schedule``, and the commands plugins register
(:data:`gossipgrad.registry.COMMANDS`: the tools' ``profile``, ``netfit``, ``plan``, ``bench``),
imported only when they run. Plugins (installed ``gossipgrad.plugins`` entry points, then
``GOSSIPGRAD_PLUGINS``) are imported first, so what they register is a choice of every
command."""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
import traceback
from typing import Any

import click

from gossipgrad import startup
from gossipgrad.choices import use_cli_names
from gossipgrad.cli.plugins import load_plugins
from gossipgrad.runtime import launch_rank

try:
    load_plugins()
except ValueError as exc:  # under a launcher: through the start-up agreement, every rank ends
    startup.fail(f"Error: {exc}")

from gossipgrad.cli.options import refuse_nonfinite  # noqa: E402 - after the plugins
from gossipgrad.cli.schedule import schedule  # noqa: E402
from gossipgrad.cli.train import train  # noqa: E402
from gossipgrad.registry import COMMANDS  # noqa: E402
from gossipgrad.settings import settings  # noqa: E402


class Main(click.Group):
    """The ``gossipgrad`` group. Under a launcher, an error that ends a rank before it has
    met the others (a bad flag, config file or ``GOSSIPGRAD_*`` variable: click's usage
    errors included) goes through the start-up agreement (:func:`gossipgrad.startup.fail`)
    instead of ending this rank alone, which leaves the others waiting in ``MPI_Init``; and
    help prints once per job (every rank parses the same command line: ranks other than 0,
    as the launcher numbers them, keep it to themselves)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [
            *super().list_commands(ctx),
            *(n for n in COMMANDS.names() if n not in self.commands),
        ]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS.names():
            module, _, attr = COMMANDS.get(name).partition(":")
            command = getattr(importlib.import_module(module), attr)
            self.add_command(refuse_nonfinite(command), name)
        return super().get_command(ctx, name)

    def main(self, *args: Any, standalone_mode: bool = True, **kw: Any) -> Any:
        if not standalone_mode or not startup.under_launcher():
            return super().main(*args, standalone_mode=standalone_mode, **kw)
        quiet = launch_rank() != 0 and bool({"-h", "--help"} & set(sys.argv[1:]))
        try:
            with contextlib.redirect_stdout(io.StringIO()) if quiet else _nothing():
                rv = super().main(*args, standalone_mode=False, **kw)
        except click.ClickException as exc:
            text, usage = startup.click_text(exc)
            startup.fail(text, usage, exc.exit_code)
        except click.exceptions.Abort:
            startup.fail("Aborted!", code=startup.INTERRUPTED)
        except ValueError as exc:
            startup.fail(f"Error: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug: show it, then end with the others
            traceback.print_exc()
            startup.fail(f"Error: unexpected {type(exc).__name__}: {exc}", code=1)
        raise SystemExit(rv if isinstance(rv, int) else 0)


@contextlib.contextmanager
def _nothing() -> Any:
    yield


@click.group(
    cls=Main,
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
    try:
        settings()  # every GOSSIPGRAD_* runtime variable, checked before any work
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


main.add_command(train)
main.add_command(schedule)
refuse_nonfinite(main)
