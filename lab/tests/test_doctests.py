"""The examples in lab.plan docstrings run and give what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["heldout", "synthetic", "validate"])
def test_docstring_examples(name: str):
    module = importlib.import_module(f"lab.plan.{name}")
    result = doctest.testmod(module)
    assert result.failed == 0
    assert result.attempted > 0, f"lab.plan.{name} has no docstring examples"
