"""``python -m lab templates-check``: the generated task (``--dataset templates``) is
learnable by the MLP of ``gossipgrad train`` but not by a linear model."""

from __future__ import annotations

import pytest

from lab.studies import templates_check


@pytest.mark.timeout(300)
def test_an_mlp_learns_it_and_a_linear_model_does_not():
    """Well above chance (0.10) for the MLP after a few epochs; a logistic regression fitted
    to convergence stays at least 20 points below it."""
    result = templates_check.check("templates", epochs=3)
    assert result["mlp_test_accuracy"] >= 0.75, result
    assert result["mlp_test_accuracy"] - result["linear_test_accuracy"] >= 0.20, result
