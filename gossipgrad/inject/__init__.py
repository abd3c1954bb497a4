"""The testing corner: faults injected on purpose, each named by its environment variable.

- :mod:`gossipgrad.inject.faults` (``GOSSIPGRAD_INJECT_KILL``): a rank that kills itself at
  a chosen step and point;
- :mod:`gossipgrad.inject.straggler` (``GOSSIPGRAD_INJECT_SLOW``): a rank whose compute takes
  FACTOR times as long;
- :mod:`gossipgrad.inject.delay` (``GOSSIPGRAD_INJECT_DELAY_MS``): one-way latency added to
  every point-to-point send.

Unset, each does nothing. Layering: this package sits at comm's layer so that comm and the
engine may call it, and imports only ``gossipgrad.comm.base``, ``gossipgrad.settings`` and
lower (``tests/unit/test_layers.py``). It imports none of its modules here, so importing one
hook loads no other.
"""
