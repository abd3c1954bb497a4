"""A toy option, outside the package: ``--toy-knob N`` is one entry of the option table
(``gossipgrad.options.register``); it then appears in ``gossipgrad train --help``, is read
from ``GOSSIPGRAD_TOY_KNOB`` and from ``--config`` files, and reaches the exchange options'
``extras`` (where a plugin's strategy, rule or timing reads it)."""

from __future__ import annotations

from gossipgrad.options import Option, extras, register

NAME = "toy_knob"

if NAME not in {o.name for o in extras()}:
    register(Option(NAME, "extras", 3, "A toy plugin's knob (a whole number).", int))
