"""The examples in the docstrings of the measuring modules and of the model facts run and
give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize(
    "name",
    [
        "gossipgrad.tools.measure.profiler",
        "gossipgrad.tools.measure.sweeps",
        "gossipgrad.tools.measure.netfit",
        "gossipgrad.models",
    ],
)
def test_docstring_examples(name: str):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0
    assert result.failed == 0
