"""Devices a model can run on besides the real ones: the stand-in accelerator.

``gossipgrad.standin(model, profile, dilate=K)`` patches a model so that each leaf module
takes the time a profile assigns to it instead of computing (see
:mod:`gossipgrad.devices.standin`); profiles are :mod:`gossipgrad.devices.profile` files,
shipped or measured with ``gossipgrad profile --layers``.
"""

from __future__ import annotations

from gossipgrad.devices.dilation import Dilation
from gossipgrad.devices.optimizer import StandinOptimizer
from gossipgrad.devices.profile import StandinProfile, shipped
from gossipgrad.devices.standin import NOTE, Standin, standin

__all__ = [
    "NOTE",
    "Dilation",
    "Standin",
    "StandinOptimizer",
    "StandinProfile",
    "shipped",
    "standin",
]
