"""Measuring the planner's inputs: ``gossipgrad profile`` and ``gossipgrad netfit``.

- ``profiler``: one rank's training step without communication -> a ``Profile``.
- ``sweeps``: timed ping-pong, exchange and allreduce sweeps over any ``Communicator``.
- ``netfit``: what to sweep and how to label it -> a ``NetworkFit``.
- ``refit``: a saved netfit's fits recomputed from its recorded times (no MPI).

Layer: above the engine and the transport (it may import engine, comm, models, plan and
runtime); below bench and cli, which import it. Nothing under comm/ or engine/ imports it.
"""
