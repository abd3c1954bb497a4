"""The ImageNet projection script's layer tables match the published architectures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gossipgrad.plan.synthetic import Layer, synthetic_profile

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "project_imagenet.py"


@pytest.fixture(scope="module")
def project():
    spec = importlib.util.spec_from_file_location("project_imagenet", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_resnet50_matches_torchvision_parameter_count_and_flops(project):
    layers = project.resnet50()
    assert sum(layer.params for layer in layers) == 25_557_032  # torchvision resnet50
    assert sum(layer.flops for layer in layers) == pytest.approx(4.09e9, rel=1e-3)  # MACs


def test_googlenet_table_totals(project):
    layers = project.googlenet()
    assert sum(layer.params for layer in layers) == 6_998_552
    assert sum(layer.flops for layer in layers) == pytest.approx(1.58e9, rel=1e-2)


def test_synthetic_profiles_use_the_stated_per_gpu_rates(project):
    profiles = project.profiles()
    assert profiles["resnet50"].local_step_s == pytest.approx(64 / 219, rel=1e-12)
    assert profiles["googlenet"].local_step_s == pytest.approx(64 / 468, rel=1e-12)
    assert profiles["resnet50"].param_bytes == 4 * 25_557_032
    report = project.report()
    assert "PREDICTIONS" in report and "| 1024 |" in report


def test_synthetic_profile_rejects_empty_layers():
    with pytest.raises(ValueError, match="layers"):
        synthetic_profile(
            "x", [Layer("a", 1, 0.0)], batch_size=1, forward_s=1.0, backward_s=1.0, optimizer_s=0.0
        )
