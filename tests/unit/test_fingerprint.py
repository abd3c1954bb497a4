"""The fingerprint that checks every rank starts from the same model: raw bytes, tensor by
tensor (no flat copy of the model), any dtype."""

from __future__ import annotations

import torch

from gossipgrad.engine.consensus import fingerprint, tensors_fingerprint


def test_equal_tensors_hash_equal_and_one_flipped_bit_does_not():
    a = [torch.arange(12, dtype=torch.float32).reshape(3, 4), torch.ones(5, dtype=torch.float64)]
    b = [t.clone() for t in a]
    assert tensors_fingerprint(a) == tensors_fingerprint(b)
    b[1].view(torch.int64)[2] ^= 1  # the lowest mantissa bit of one element
    assert tensors_fingerprint(a) != tensors_fingerprint(b)


def test_order_and_dtype_count_and_every_dtype_hashes():
    x, y = torch.zeros(4), torch.ones(4)
    assert tensors_fingerprint([x, y]) != tensors_fingerprint([y, x])
    # the same values in another dtype are other bytes: not the same model
    assert tensors_fingerprint([y]) != tensors_fingerprint([y.double()])
    for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.int8, torch.complex64):
        t = torch.ones(3, dtype=dtype)
        assert tensors_fingerprint([t]) == fingerprint(t) >= 0


def test_a_strided_view_hashes_as_its_values():
    base = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    view = base.t()  # not contiguous
    assert tensors_fingerprint([view]) == tensors_fingerprint([view.contiguous()])
    assert tensors_fingerprint([view]) != tensors_fingerprint([base])
