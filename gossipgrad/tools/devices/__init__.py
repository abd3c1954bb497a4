"""Devices a model can run on besides the real ones: the stand-in accelerator.

``standin(model, profile, dilate=K)`` patches a model so that each leaf module takes the
time a profile assigns to it instead of computing (see
:mod:`gossipgrad.tools.devices.standin`); profiles are
:mod:`gossipgrad.tools.devices.profile` files, shipped or measured with
``gossipgrad profile --layers``. In training it is ``--device standin:PROFILE``
(:mod:`gossipgrad.tools.devices.training`).
"""

from __future__ import annotations

from gossipgrad.tools.devices.dilation import Dilation
from gossipgrad.tools.devices.optimizer import StandinOptimizer
from gossipgrad.tools.devices.profile import StandinProfile, shipped
from gossipgrad.tools.devices.standin import NOTE, Standin, standin

__all__ = [
    "NOTE",
    "Dilation",
    "Standin",
    "StandinOptimizer",
    "StandinProfile",
    "shipped",
    "standin",
]
