"""The ImageNet projection script's layer tables match the published architectures."""

from __future__ import annotations

import pytest

from lab.plan.synthetic import Layer, synthetic_profile
from lab.studies import project_imagenet


@pytest.fixture(scope="module")
def project():
    return project_imagenet


def test_resnet50_matches_torchvision_parameter_count_and_flops(project):
    layers = project.resnet50()
    assert sum(layer.params for layer in layers) == 25_557_032  # torchvision resnet50
    assert sum(layer.flops for layer in layers) == pytest.approx(4.09e9, rel=1e-3)  # MACs


def _googlenet_in_the_papers_form() -> dict[str, int]:
    """Parameters per block of torchvision's GoogLeNet (the paper's channel counts), counted
    as the paper's network has them: a bias on every convolution, no batch norm, and 5x5
    kernels in the third branch, where torchvision uses 3x3 (a known torchvision deviation).
    Blocks are named as in the script's table."""
    torchvision = pytest.importorskip("torchvision", reason="pip install 'gossipgrad[vision]'")
    import torch

    model = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=False)
    assert sum(p.numel() for p in model.parameters()) == 6_624_904  # torchvision's own count
    renamed = {"conv2": "conv2.reduce", "conv3": "conv2"}
    blocks: dict[str, int] = {}
    for name, module in model.named_modules():
        block = name.split(".")[0]
        block = renamed.get(block, block)
        if isinstance(module, torch.nn.Conv2d):
            k = 5 if name.endswith("branch3.1.conv") else module.kernel_size[0]
            n = module.in_channels * module.out_channels * k * k + module.out_channels
        elif isinstance(module, torch.nn.Linear):
            n = sum(p.numel() for p in module.parameters())
        else:
            continue
        blocks[block] = blocks.get(block, 0) + n
    return blocks


def test_googlenet_table_matches_torchvision_counted_in_the_papers_form(project):
    layers = project.googlenet()
    assert {layer.name: layer.params for layer in layers} == _googlenet_in_the_papers_form()
    assert sum(layer.params for layer in layers) == 6_998_552
    # the paper's "1.5 billion multiply-adds" (this table: 1.58e9)
    assert sum(layer.flops for layer in layers) == pytest.approx(1.5e9, rel=0.06)


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
