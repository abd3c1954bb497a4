"""Benchmarks behind ``gossipgrad bench``: functions that run a benchmark (collective) and
return a JSON-able record; the click commands that parse options and print live in
:mod:`gossipgrad.tools.cli.bench`.

- ``exchange``: bucketed gossip exchange vs a raw MPI Sendrecv of the same bytes.
- ``overlap``: compute-only vs blocking vs overlapped step time.
- ``strategies``: gossip vs allreduce vs local (any name the engine factory knows).
- ``shuffle_cost``: step time with the background sample shuffle on vs off.
- ``tta``: time to a target accuracy, every strategy on one job (``tta_report``: its table).

The studies of the project's own claims (the planner's validation, stragglers, ps-lag,
convergence) live in ``lab/bench`` (not installed) and import ``common`` from here.
"""
