"""What the tools register into the runtime (the ``gossipgrad.plugins`` entry point
``tools``): their commands, imported only when one runs, and the stand-in device. Loading
this module imports nothing heavy: ``gossipgrad train`` pays for none of the tools."""

from __future__ import annotations

from gossipgrad.registry import COMMANDS, DEVICES
from gossipgrad.tools.devices.training import StandinDevice

for _name, _target in {
    "profile": "gossipgrad.tools.cli.profile:profile",
    "netfit": "gossipgrad.tools.cli.netfit:netfit",
    "plan": "gossipgrad.tools.cli.plan:plan",
    "bench": "gossipgrad.tools.cli.bench:bench",
    "simulate": "gossipgrad.tools.cli.simulate:simulate",
}.items():
    if _name not in COMMANDS.names():
        COMMANDS.register(_name, _target)
if StandinDevice.name not in DEVICES.names():
    DEVICES.register(StandinDevice.name, StandinDevice())
