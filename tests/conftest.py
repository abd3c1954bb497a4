"""The test suite's tiers, one folder each, and the fixtures they share.

- ``unit/``: pure functions and single objects; no communicator, no process.
- ``inprocess/``: ranks as threads on the in-process world (``gossipgrad.comm.local``).
- ``mpi/``: a real ``mpiexec`` (the MPICH wheel's), every launch with a deadline.
- ``system/``: a real Slurm, network namespaces, Open MPI's ULFM, the Horovod build.
- ``support/``: what the tiers share (launch helpers, multi-rank checks, data builders,
  the toy plugins and example scripts); on ``sys.path`` from here, never collected.

Each test reads the environment afresh:

``gossipgrad.settings.settings()`` caches the environment on first use (a
process reads it once); tests that set variables with ``monkeypatch.setenv``
need the cache dropped around them so one test's environment never leaks into
the next.
"""

import sys
from pathlib import Path

import pytest

from gossipgrad import settings as settings_module

SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))
sys.path.insert(0, str(SUPPORT / "plugins"))  # the toys of tests/*/test_seams*.py
collect_ignore = ["support"]


@pytest.fixture(autouse=True)
def fresh_settings():
    settings_module.settings.cache_clear()
    yield
    settings_module.settings.cache_clear()


@pytest.fixture
def cli_names():
    """Messages spell options as command-line flags (``--max-lag 2``), as under the CLI."""
    from gossipgrad.choices import cli_names as spelled_as_flags

    with spelled_as_flags():
        yield
