"""Horovod's ``compression`` and ``backward_passes_per_step`` beside gossipgrad's own
``wire`` and ``backward_passes_per_step`` (a keyword or ``GOSSIPGRAD_*``): Horovod's
default never hides the other; two different asks are refused in one line."""

from __future__ import annotations

import pytest

from gossipgrad.torch import Compression
from gossipgrad.torch.compression import wire_of
from gossipgrad.torch.optimizer import face_arguments


def test_compression_maps_to_its_wire_codec():
    assert wire_of(Compression.none) == "fp32" and wire_of(Compression.fp16) == "fp16"


@pytest.mark.parametrize(
    "fields, wire, passes, want",
    [
        ({}, "fp32", 1, {"wire": "fp32", "backward_passes_per_step": 1}),
        ({"wire": "bf16"}, "fp32", 1, {"wire": "bf16", "backward_passes_per_step": 1}),
        (
            {"backward_passes_per_step": "4"},
            "fp32",
            1,
            {"wire": "fp32", "backward_passes_per_step": "4"},
        ),
        ({}, "fp16", 2, {"wire": "fp16", "backward_passes_per_step": 2}),
        ({"wire": "fp16"}, "fp16", 1, {"wire": "fp16", "backward_passes_per_step": 1}),
    ],
)
def test_neither_side_is_lost(fields, wire, passes, want):
    assert face_arguments(fields, wire, passes) == want


def test_two_different_asks_are_refused_naming_both():
    with pytest.raises(ValueError, match=r"compression= asks for wire 'fp16', but wire='bf16'"):
        face_arguments({"wire": "bf16"}, "fp16", 1)
    with pytest.raises(ValueError, match=r"backward_passes_per_step= asks for .* 2, but .*'3'"):
        face_arguments({"backward_passes_per_step": "3"}, "fp32", 2)
