"""Benchmarks behind ``gossipgrad bench``: one module per benchmark, each returns a record.

- ``exchange``: bucketed gossip exchange vs a raw MPI Sendrecv of the same bytes.
- ``overlap``: compute-only vs blocking vs overlapped step time.
- ``strategies``: gossip vs allreduce vs local (any name the engine factory knows).
"""
