"""Every docstring example in the installed package runs and gives what it shows (the
package's doctests, one test per module; a module without examples is not listed)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gossipgrad

NOT_IMPORTED = {
    "gossipgrad.__main__",  # runs the command line when imported
    "gossipgrad.comm.mpi",  # initialises MPI in this process (the MPI tests launch mpiexec)
}


def _modules() -> list[str]:
    names = [gossipgrad.__name__]
    for info in pkgutil.walk_packages(gossipgrad.__path__, prefix="gossipgrad."):
        if info.name not in NOT_IMPORTED:
            names.append(info.name)
    return sorted(names)


def _with_examples(name: str) -> bool:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return any(t.examples for t in finder.find(module, name))


MODULES = [n for n in _modules() if _with_examples(n)]


def test_the_package_has_docstring_examples():
    assert len(MODULES) >= 50, MODULES  # a walk that found nothing would pass vacuously


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
