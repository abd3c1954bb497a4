"""``GOSSIPGRAD_PLUGINS=mod1,mod2``: modules the command line imports before it parses
flags, so that a strategy, mixing rule or wire codec they register is a choice there
(``gossipgrad train --strategy mine``). Every rank imports them (the variable travels with
the launcher's environment); a module that cannot be imported is one line naming it."""

from __future__ import annotations

import importlib

from gossipgrad.registry import load_entry_points
from gossipgrad.settings import settings


def load_plugins() -> list[str]:
    """Import the installed plugins (``gossipgrad.plugins`` entry points: the tools among
    them), then every module named in ``GOSSIPGRAD_PLUGINS``; return the latter's names.
    ValueError (one line) for a module that cannot be imported."""
    load_entry_points()
    names = [n.strip() for n in (settings().plugins or "").split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any failure is the user's module's
            raise ValueError(
                f"GOSSIPGRAD_PLUGINS: cannot import {name!r} ({type(exc).__name__}: {exc}); "
                "is it on PYTHONPATH?"
            ) from None
    return names
