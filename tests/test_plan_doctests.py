"""The examples in gossipgrad.plan docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "convergence",
    "fit",
    "formats",
    "host",
    "memory",
    "model",
    "planner",
    "report",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str):
    module = importlib.import_module(f"gossipgrad.plan.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted > 0, f"gossipgrad.plan.{name} has no docstring examples"
