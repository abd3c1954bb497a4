"""``--dataset templates``: deterministic, balanced, disjoint splits. That it is learnable by
the MLP but not by a linear model is the lab's check (lab/tests/test_templates_check.py)."""

from __future__ import annotations

import numpy as np

from gossipgrad.data import templates
from gossipgrad.data.tensors import load_tensor_data
from gossipgrad.options import DataOptions


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
