"""Where a command's result goes: a file (``--out``) or stdout."""

from __future__ import annotations

import click


def write_output(text: str, out: str | None) -> None:
    """Write ``text`` plus a newline to ``out``, or echo it when ``out`` is None; an
    unwritable path becomes a one-line error (exit code 1), not a traceback."""
    if out is None:
        click.echo(text)
        return
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc}") from exc
