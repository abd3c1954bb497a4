"""The stand-in profile format, the shipped profiles and the dilation arithmetic (pure)."""

from __future__ import annotations

import copy
import json

import pytest

from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import Device, parse_device
from gossipgrad.tools.devices.dilation import Dilation, format_rate, parse_rate
from gossipgrad.tools.devices.profile import ALIASES, FORMAT, StandinProfile, shipped
from gossipgrad.tools.plan.formats import Profile
from lab.devices.published import PUBLISHED


def _doc() -> dict:
    """A minimal valid document: two layers, two parameters."""
    return {
        "format": FORMAT,
        "arch": "mlp",
        "hidden": 0,
        "input_shape": [1, 8, 8],
        "classes": 10,
        "precision": "fp32",
        "source": {"kind": "published", "reference": "a test"},
        "model": "mlp",
        "batch_size": 32,
        "device": "a GPU",
        "forward_s": 0.03,
        "backward_s": 0.06,
        "optimizer_s": 0.001,
        "param_bytes": 80,
        "buckets": [
            {"index": 1, "bytes": 40, "ready_s": 0.02, "name": "1.bias"},
            {"index": 0, "bytes": 40, "ready_s": 0.06, "name": "1.weight"},
        ],
        "layers": [
            {"name": "0", "kind": "Flatten", "calls": 1, "forward_s": 0.0, "backward_s": 0.0},
            {"name": "1", "kind": "Linear", "calls": 1, "forward_s": 0.03, "backward_s": 0.06},
        ],
    }


def _error(doc: dict, name: str = "p.json") -> str:
    with pytest.raises(ValueError) as info:
        StandinProfile.from_json(doc, name)
    return str(info.value)


def test_a_valid_document_round_trips_and_is_a_planner_profile():
    p = StandinProfile.from_json(_doc(), "p.json")
    assert p.compute_s == pytest.approx(0.091)
    assert p.layer("1").per_call() == (0.03, 0.06)
    assert p.bucket_names == ("1.bias", "1.weight")
    again = StandinProfile.from_json(json.loads(json.dumps(p.to_json())), "again")
    assert again.to_json() == p.to_json()
    assert Profile.from_json(p.to_json()).backward_s == 0.06  # the planner reads it


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("layers"), "'layers' is missing"),
        (lambda d: d.update(format="other/1"), "'format'"),
        (lambda d: d["layers"][1].update(forward_s=-1.0), "'layers[1].forward_s' must be >= 0"),
        (lambda d: d["layers"][1].update(calls=0), "'layers[1].calls' is 0"),
        (lambda d: d["layers"][1].update(name="0"), "'layers[1].name' must be a unique"),
        (lambda d: d["layers"][1].update(backward_s=0.05), "backward_s sum to 0.05"),
        (lambda d: d["source"].update(kind="guessed"), "'source.kind'"),
        (lambda d: d.update(precision="int8"), "'precision'"),
        (lambda d: d.update(input_shape=[]), "'input_shape'"),
        (lambda d: d["buckets"][0].update(ready_s=1.0), "'buckets[0].ready_s' must be <="),
        (lambda d: d.pop("backward_s"), "'backward_s' is missing"),
    ],
)
def test_a_bad_field_is_one_line_naming_the_file_and_the_field(change, field):
    doc = copy.deepcopy(_doc())
    change(doc)
    message = _error(doc, "bad.json")
    assert message.startswith("stand-in profile bad.json: "), message
    assert field in message and "\n" not in message, message


def test_load_names_the_file_and_lists_the_shipped_profiles(tmp_path):
    with pytest.raises(
        ValueError, match="no such file.*resnet50-p100-fp32-b64.*short names: resnet50"
    ):
        StandinProfile.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match=f"stand-in profile {bad}: not valid JSON"):
        StandinProfile.load(bad)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc()))
    assert StandinProfile.load(good).name == str(good)


def test_every_shipped_profile_loads_with_its_source_and_matches_its_publication():
    assert set(shipped()) == set(PUBLISHED)
    for name, pub in PUBLISHED.items():
        p = StandinProfile.load(name)
        assert p.source["kind"] == "published" and p.source["url"] and p.source["reference"]
        assert p.batch_size == pub.batch_size and p.arch == pub.arch
        # the whole step is the publication's: batch / images per second
        assert p.compute_s == pytest.approx(pub.batch_size / pub.images_per_s, rel=1e-9)
        assert len(p.bucket_names) == len(p.planner.buckets) > 1
    for alias, name in ALIASES.items():
        assert StandinProfile.load(alias).name.startswith(name)


def test_the_shipped_multiply_adds_agree_with_torchvision():
    # torchvision's published GFLOPS (weights meta "_ops", multiply-adds per image)
    published = {"resnet50": 4.089, "vgg16": 15.47, "googlenet": 1.498}
    for arch, gmacs in published.items():
        p = StandinProfile.load(arch)
        # googlenet's count includes its two auxiliary heads (+0.6 %)
        assert p.source["gmacs_per_image"] == pytest.approx(gmacs, rel=0.01), arch


def test_dilation_arithmetic():
    d = Dilation(10)
    assert d.device_s(0.3) == pytest.approx(3.0)
    assert d.undilated(3.0) == pytest.approx(0.3)
    assert d.samples_per_s(20.0) == pytest.approx(200.0)
    assert d.emulated_rate("10gbit") == "1gbit"
    assert Dilation(25).emulated_rate("25gbit") == "1gbit"
    assert d.stands_for_rate("1gbit") == "10gbit"
    assert d.emulated_delay_ms(0.05) == pytest.approx(0.5)
    assert parse_rate("100mbit") == 1e8 and format_rate(2.5e9) == "2.5gbit"
    for bad in (0, -1, float("inf"), True):
        with pytest.raises(ValueError, match="--dilate"):
            Dilation(bad)
    with pytest.raises(ValueError, match="link rate"):
        parse_rate("fast")


def test_device_option_takes_standin_with_a_profile_and_round_trips(cli_names):
    assert parse_device("standin:vgg16") == ("standin", "vgg16")
    assert parse_device("cuda") == (Device.CUDA.value, None)
    with pytest.raises(ValueError, match="standin:PROFILE"):
        parse_device("standin")
    with pytest.raises(ValueError, match="takes no argument"):
        parse_device("cpu", "resnet50")
    with pytest.raises(ValueError, match="unknown device 'tpu'.*standin:ARG"):
        parse_device("tpu")
    cfg = TrainConfig.from_flags(device="standin:resnet50", dilate=10)
    assert (cfg.run.device, cfg.run.device_arg, cfg.run.dilate) == ("standin", "resnet50", 10)
    assert cfg.run.device_spec is not None and not cfg.run.device_spec.measures
    assert TrainConfig.from_flags(**cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="--dilate must be > 0"):
        TrainConfig.from_flags(dilate=0)
    # a dilation without a stand-in would be a silent no-op: refused, naming what it needs
    with pytest.raises(ValueError, match="needs --device standin:PROFILE"):
        TrainConfig.from_flags(dilate=10)
    assert TrainConfig.from_flags(dilate=1).run.dilate == 1


@pytest.mark.parametrize(
    "name", ["gossipgrad.tools.devices.dilation", "gossipgrad.tools.bench.standin"]
)
def test_docstring_examples(name: str):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, result


@pytest.mark.parametrize("size", [4, 8])
def test_the_planner_groups_a_shipped_profile_as_the_engine_groups_the_model(size):
    # GoogLeNet registers its auxiliary heads last, but backward reaches them mid-way: the
    # engine's first bucket (reverse registration order) holds them and is ready late
    import torchvision

    from gossipgrad.engine.buckets import BucketLayout
    from gossipgrad.engine.ps.shards import ps_bucket_cap
    from gossipgrad.tools.plan.model import rebucket

    prof = StandinProfile.load("googlenet").planner
    assert prof.per_parameter
    model = torchvision.models.googlenet(aux_logits=True, init_weights=False)
    named = list(model.named_parameters())
    ready = {b.index: b.ready_s for b in prof.buckets}
    cap = ps_bucket_cap(prof.param_bytes, size, 25 << 20)
    position = {id(p): i for i, (_, p) in enumerate(named)}
    engine = sorted(
        (max(ready[position[id(p)]] for p in b.params), b.nbytes)
        for b in BucketLayout([p for _, p in named], cap).buckets
    )
    planned = [(b.ready_s, b.bytes) for b in rebucket(prof.buckets, cap, registration=True)]
    assert planned == engine
    assert planned != [(b.ready_s, b.bytes) for b in rebucket(prof.buckets, cap)]
