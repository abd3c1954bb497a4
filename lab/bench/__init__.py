"""Studies behind ``python -m lab``: functions that run one (collective, unless they launch
``mpiexec`` themselves) and return a JSON-able record; the click commands live in
:mod:`lab.cli`. Shared helpers come from :mod:`gossipgrad.tools.bench.common`."""
