"""Benchmarks behind ``gossipgrad bench``: functions that run a benchmark (collective) and
return a JSON-able record; the click commands that parse options and print live in
:mod:`gossipgrad.cli.bench`.

- ``exchange``: bucketed gossip exchange vs a raw MPI Sendrecv of the same bytes.
- ``overlap``: compute-only vs blocking vs overlapped step time.
- ``strategies``: gossip vs allreduce vs local (any name the engine factory knows).
- ``shuffle_cost``: step time with the background sample shuffle on vs off.
- ``plan_validate``: the planner's predictions against measured step times (its runs in
  ``plan_runs``, its predictions in ``plan_predict``, its scoring in ``plan_score``).
"""
