"""The wire codecs, pure: bytes on the wire, error bounds, what survives a cast (tiny and huge
values, NaN, infinity), error feedback and its checkpointed residuals, and the options that
name them. No communication here (tests/support/multirank/codec_checks.py moves them)."""

from __future__ import annotations

import io
import math

import pytest
import torch

import gossipgrad  # noqa: F401 - registers every built-in codec
from gossipgrad.comm.codecs import Codec, make_codec
from gossipgrad.comm.codecs.fp8 import CHUNK
from gossipgrad.options import ExchangeOptions
from gossipgrad.registry import CODECS

LOSSY = ["bf16", "fp16", "fp8"]
SIZES = [0, 1, 7, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5, 100_000]


def _round_trip(name: str, x: torch.Tensor, feedback: bool = False) -> torch.Tensor:
    codec = make_codec(name, feedback)
    wire = codec.encode_(x, codec.wire_like(x), key=0)
    assert wire.dtype == torch.uint8 and wire.numel() == codec.wire_nbytes(x)
    return codec.decode(wire, x, key=0)


def _spread(n: int, seed: int = 0) -> torch.Tensor:
    """Values over ten orders of magnitude, both signs: what a gradient bucket holds."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * torch.logspace(-9, 1, n) if n else torch.zeros(0)


def test_every_codec_is_a_choice():
    assert CODECS.names()[:4] == ("fp32", "bf16", "fp16", "fp8")
    for name in CODECS.names():
        assert isinstance(make_codec(name), Codec)


@pytest.mark.parametrize("n", SIZES)
def test_bytes_on_the_wire(n):
    """bf16 half of fp32, fp16 half plus one scale, fp8 a quarter plus a scale per chunk."""
    assert make_codec("fp32").wire_nbytes((n, 4)) == 4 * n
    assert make_codec("bf16").wire_nbytes((n, 4)) == 2 * n
    assert make_codec("fp16").wire_nbytes((n, 4)) == (2 * n + 4 if n else 0)
    assert make_codec("fp8").wire_nbytes((n, 4)) == n + 4 * math.ceil(n / CHUNK)


def test_wire_ratios_of_a_large_bucket():
    assert make_codec("bf16").wire_ratio(4) == 0.5
    assert make_codec("fp16").wire_ratio(4) == pytest.approx(0.5, abs=1e-5)
    assert make_codec("fp8").wire_ratio(4) == pytest.approx(0.25 * (1 + 4 / CHUNK))


@pytest.mark.parametrize("n", SIZES)
def test_bf16_keeps_8_significant_bits(n):
    x = _spread(n)
    y = _round_trip("bf16", x)
    assert (y - x).abs().le(x.abs() * 2**-8).all()


@pytest.mark.parametrize("n", SIZES)
def test_fp16_keeps_11_bits_over_the_buffers_range(n):
    """One power-of-two scale per buffer: values within 2^28 of the largest keep float16's
    precision (plain float16 would flush those below 6e-5 to zero)."""
    x = _spread(n)
    y = _round_trip("fp16", x)
    amax = float(x.abs().max()) if n else 0.0
    keep = x.abs() >= amax * 2**-28
    assert (y - x).abs()[keep].le(x.abs()[keep] * 2**-11).all()
    assert (y - x).abs().le(amax * 2**-38).logical_or(keep).all()


def test_fp16_does_not_flush_small_gradients_or_overflow_large_ones():
    small = torch.tensor([3e-9, -1e-12, 2e-10, 5e-11])
    assert torch.allclose(_round_trip("fp16", small), small, rtol=2**-11, atol=0)
    big = torch.tensor([7e5, -3e9, 1.0])
    assert torch.allclose(_round_trip("fp16", big)[:2], big[:2], rtol=2**-11, atol=0)


@pytest.mark.parametrize("n", SIZES)
def test_fp8_keeps_4_bits_per_chunk(n):
    """e4m3 after a scale per chunk: 2^-4 of each value, or the subnormal step below."""
    x = _spread(n)
    y = _round_trip("fp8", x)
    for lo in range(0, n, CHUNK):
        chunk, got = x[lo : lo + CHUNK], y[lo : lo + CHUNK]
        scale = float(chunk.abs().max()) / 448
        bound = torch.clamp(chunk.abs() * 2**-4, min=scale * 2**-10)
        assert (got - chunk).abs().le(bound * (1 + 1e-6)).all(), lo


@pytest.mark.parametrize("name", LOSSY)
def test_non_finite_values_stay_non_finite(name):
    x = torch.tensor([1.0, float("nan"), -2.0, 0.5])
    assert torch.isnan(_round_trip(name, x)[1])
    if name != "fp8":  # e4m3 has no infinity: the whole chunk's scale is lost to it
        y = _round_trip(name, torch.tensor([1.0, float("inf"), -2.0]))
        assert y[1] == float("inf")


@pytest.mark.parametrize("name", LOSSY)
def test_decode_leaves_the_wire_and_the_source_alone(name):
    """The exchange decodes what this rank sent (to know what the peer got): a decode
    must not write the wire; an encode must not write the source."""
    codec = make_codec(name)
    x = _spread(1000)
    before = x.clone()
    wire = codec.encode_(x, codec.wire_like(x), key=0)
    copy = wire.clone()
    codec.decode(wire, x, key=0)
    assert torch.equal(wire, copy) and torch.equal(x, before)


@pytest.mark.parametrize("name", LOSSY)
def test_float64_buffers_decode_as_float64(name):
    x = torch.linspace(-1, 1, 33, dtype=torch.float64)
    y = _round_trip(name, x)
    assert y.dtype == torch.float64 and torch.allclose(y, x, rtol=0.07, atol=1e-2)


def test_error_feedback_default_is_on_for_fp8_only():
    assert [make_codec(n).feedback for n in ["fp32", "bf16", "fp16", "fp8"]] == [
        False,
        False,
        False,
        True,
    ]
    assert make_codec("bf16", feedback=True).feedback
    assert not make_codec("fp8", feedback=False).feedback
    with pytest.raises(ValueError, match="error feedback needs a lossy wire codec"):
        make_codec("fp32", feedback=True)


@pytest.mark.parametrize("name", LOSSY)
def test_error_feedback_sends_what_it_was_asked_to_over_time(name):
    """The same buffer sent 64 times: with feedback the sum of what arrived is within one
    cast of 64 x the buffer (the residual is bounded); without, the error grows 64-fold."""
    x = 0.3 + 1e-3 * _spread(2000, seed=1)
    for feedback, bound in ((True, 1.0), (False, 64.0)):
        codec = make_codec(name, feedback)
        wire = codec.wire_like(x)
        total = torch.zeros_like(x, dtype=torch.float64)
        for _ in range(64):
            total += codec.decode(codec.encode_(x, wire, key=7), x, key=7)
        one = (_round_trip(name, x) - x).abs().max().item()
        err = (total - 64 * x.double()).abs().max().item()
        if feedback:
            assert err <= 2 * one + 1e-6, (err, one)
            assert codec.residual_norm() > 0
        else:
            assert err == pytest.approx(bound * one, rel=1e-3)


def test_residuals_are_per_key_and_survive_a_checkpoint():
    codec = make_codec("fp8")
    a, b = _spread(700, seed=2), _spread(30, seed=3)
    codec.encode_(a, codec.wire_like(a), key=0)
    codec.encode_(b, codec.wire_like(b), key=(0, "mean"))
    state = codec.state_dict()
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    again = make_codec("fp8")
    again.load_state_dict(loaded)
    assert again.state_dict()["keys"] == state["keys"]
    for k in (0, (0, "mean")):
        x = a if k == 0 else b
        w1, w2 = codec.wire_like(x), again.wire_like(x)
        assert torch.equal(codec.encode_(x, w1, key=k), again.encode_(x, w2, key=k))


def test_residuals_refuse_a_run_that_cannot_use_them():
    codec = make_codec("fp8")
    x = _spread(100)
    codec.encode_(x, codec.wire_like(x), key=0)
    with pytest.raises(ValueError, match="resume with --error-feedback on"):
        make_codec("fp8", feedback=False).load_state_dict(codec.state_dict())
    with pytest.raises(ValueError, match="keeps no state"):
        make_codec("fp32").load_state_dict(codec.state_dict())
    assert make_codec("bf16").state_dict() == {}  # no feedback: nothing per rank


def test_a_restored_residual_waits_for_a_buffer_it_fits():
    """A resumed run may lay its buckets out differently until the sufficient-factor
    decision (its first step): a residual that does not fit is not used, not lost, and
    claimed once a buffer of its shape comes."""
    codec = make_codec("fp8")
    x = _spread(100)
    codec.encode_(x, codec.wire_like(x), key=0)
    saved = codec.state_dict()
    other = make_codec("fp8")
    other.load_state_dict(saved)
    y = _spread(101)
    other.encode_(y, other.wire_like(y), key=0)  # another layout: zeros for now
    other.forget()  # the layout changes back
    assert torch.equal(other.state_dict()["residuals"][0], saved["residuals"][0])
    w1, w2 = codec.wire_like(x), other.wire_like(x)
    assert torch.equal(codec.encode_(x, w1, key=0), other.encode_(x, w2, key=0))


def test_options_name_the_codec_and_its_feedback():
    assert ExchangeOptions(wire="fp8").feedback is None
    assert ExchangeOptions(wire="bf16", error_feedback="on").feedback is True
    with pytest.raises(ValueError, match=r"error_feedback='on' needs a lossy wire codec"):
        ExchangeOptions(error_feedback="on")
    with pytest.raises(ValueError, match="unknown wire codec 'fp4'"):
        ExchangeOptions(wire="fp4")


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"strategy": "ddp", "wire": "fp8"}, "its library's own compression is fp32, bf16 or fp16"),
        ({"strategy": "horovod", "wire": "bf16"}, "its library's own compression is fp32 or fp16"),
        ({"strategy": "allreduce-param", "wire": "bf16"}, "every rank would hold the averaged"),
        ({"strategy": "local", "wire": "bf16"}, "local does not read it"),
        ({"strategy": "ddp", "wire": "bf16", "error_feedback": "on"}, "keeps no residual"),
        ({"max_lag": 2, "wire": "fp8", "error_feedback": "off"}, "a lagged frame always"),
    ],
)
def test_bad_combinations_get_one_line(kw, message):
    with pytest.raises(ValueError, match=message) as err:
        ExchangeOptions(**kw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "kw",
    [
        {"strategy": "ddp", "wire": "bf16"},
        {"strategy": "ddp", "wire": "fp16"},
        {"strategy": "horovod", "wire": "fp16"},
        {"strategy": "allreduce", "wire": "fp8", "error_feedback": "off"},
        {"strategy": "ps", "wire": "bf16", "max_lag": 1},
        {"mix": "grad", "wire": "fp16", "staleness": 1},
        {"wire": "fp8", "max_lag": 2},
    ],
)
def test_good_combinations_pass(kw):
    assert ExchangeOptions(**kw).wire == kw["wire"]


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8"])
def test_a_wire_encoded_without_feedback_decodes_to_its_new_values(name):
    """Feedback switched off (a joined rank's steps) after a send with it: the decoding of
    the reused wire is the new one, not the one the feedback send cached."""
    codec = make_codec(name, feedback=True)
    a, b = torch.linspace(-1, 1, 1000), torch.linspace(2, 3, 1000)
    wire = codec.wire_like(a)
    codec.encode_(a, wire, 0)
    codec.set_feedback(False)
    codec.encode_(b, wire, 0)
    fresh = make_codec(name, feedback=False)
    assert torch.equal(codec.decode(wire, b, 0), fresh.decode(wire, b, 0))
    assert torch.allclose(codec.decode(wire, b, 0), b, rtol=0.07)
