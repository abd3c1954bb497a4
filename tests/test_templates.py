"""``--dataset templates``: deterministic, balanced, disjoint splits, and learnable by the MLP
but not by a linear model (scripts/templates_check.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from gossipgrad.data import templates
from gossipgrad.data.tensors import load_tensor_data
from gossipgrad.options import DataOptions

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "templates_check.py"


def test_generation_is_deterministic_and_balanced():
    x, y = templates.generate(2000)
    x2, y2 = templates.generate(2000)
    assert x.dtype == np.float32 and x.shape == (2000, 1, templates.SIDE, templates.SIDE)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)
    assert np.bincount(y).tolist() == [200] * templates.CLASSES
    assert not np.array_equal(x, templates.generate(2000, seed=1)[0])
    assert 0.3 < float(x.std()) < 1.5  # of order 1 for the default learning rate


def test_splits_are_disjoint_and_sized():
    data = load_tensor_data("templates")
    assert data.name == "templates" and data.classes == 10 and data.in_shape == (1, 16, 16)
    assert len(data.train_y) == templates.SAMPLES - templates.TEST
    assert len(data.test_y) == templates.TEST
    train = {row.tobytes() for row in data.train_x.numpy()}
    test = {row.tobytes() for row in data.test_x.numpy()}
    assert len(train) == len(data.train_y) and len(test) == len(data.test_y)  # no duplicates
    assert not train & test
    assert "templates" in DataOptions.DATASETS


@pytest.mark.timeout(300)
def test_an_mlp_learns_it_and_a_linear_model_does_not():
    """Well above chance (0.10) for the MLP after a few epochs; a logistic regression fitted
    to convergence stays at least 20 points below it."""
    spec = importlib.util.spec_from_file_location("templates_check", SCRIPT)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    result = check.check("templates", epochs=3)
    assert result["mlp_test_accuracy"] >= 0.75, result
    assert result["mlp_test_accuracy"] - result["linear_test_accuracy"] >= 0.20, result
