"""Profile / network JSON: round trips and validation messages that name the field."""

from __future__ import annotations

import copy
import json

import pytest

from gossipgrad.tools.plan.formats import AllreduceFit, Bucket, LinkFit, NetworkFit, Profile

PROFILE = {
    "model": "resnet50",
    "batch_size": 64,
    "device": "P100",
    "forward_s": 0.1,
    "backward_s": 0.2,
    "optimizer_s": 0.01,
    "param_bytes": 300,
    "buckets": [
        {"index": 0, "bytes": 100, "ready_s": 0.05},
        {"index": 1, "bytes": 200, "ready_s": 0.2},
    ],
    "memory_bytes": 5000,
}
NETWORK = {
    "p2p": {"alpha_s": 2e-6, "beta_s_per_byte": 8e-11, "r2": 0.999},
    "allreduce": {"alpha_s": 3e-5, "beta_s_per_byte": 2e-10, "r2": 0.99, "size": 8},
    "source": "netfit on 8 ranks",
}


def test_profile_round_trip_and_derived_values(tmp_path):
    p = Profile.from_json(PROFILE)
    assert p.buckets == (Bucket(0, 100, 0.05), Bucket(1, 200, 0.2))
    assert p.memory_bytes == 5000 and p.grad_bytes == 300
    assert p.local_step_s == pytest.approx(0.31, rel=1e-12)
    assert p.to_json() == PROFILE
    p.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == p
    no_mem = {k: v for k, v in PROFILE.items() if k != "memory_bytes"}
    assert Profile.from_json(no_mem).memory_bytes is None
    assert "memory_bytes" not in Profile.from_json(no_mem).to_json()
    assert not p.per_parameter and "per_parameter" not in p.to_json()
    per = Profile.from_json({**PROFILE, "per_parameter": True})
    assert per.per_parameter and per.to_json() == {**PROFILE, "per_parameter": True}


def test_network_round_trip(tmp_path):
    n = NetworkFit.from_json(NETWORK)
    assert n.p2p == LinkFit(2e-6, 8e-11, 0.999)
    assert n.allreduce == AllreduceFit(3e-5, 2e-10, 0.99, size=8)
    assert n.p2p.seconds(1e6) == pytest.approx(2e-6 + 8e-5, rel=1e-12)
    assert n.to_json() == NETWORK
    n.save(tmp_path / "n.json")
    assert NetworkFit.load(tmp_path / "n.json") == n
    minimal = NetworkFit.from_json({"p2p": NETWORK["p2p"]})
    assert minimal.allreduce is None and minimal.source == "unknown"
    assert minimal.allreduce_in_flight is None


IN_FLIGHT = {"alpha_s": 4e-5, "beta_s_per_byte": 1.5e-10, "r2": 0.98, "size": 8, "in_flight": 4}


def test_network_with_allreduces_in_flight_round_trips():
    n = NetworkFit.from_json({**NETWORK, "allreduce_in_flight": IN_FLIGHT})
    assert n.allreduce_in_flight == AllreduceFit(4e-5, 1.5e-10, 0.98, size=8, in_flight=4)
    assert n.allreduce.in_flight == 1  # the one-at-a-time sweep
    assert n.to_json() == {**NETWORK, "allreduce_in_flight": IN_FLIGHT}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("in_flight", ..., "network field 'allreduce_in_flight.in_flight' is missing"),
        ("in_flight", 0, "'allreduce_in_flight.in_flight' must be >= 1, got 0"),
        ("in_flight", "4", "'allreduce_in_flight.in_flight' must be an integer"),
        ("size", 1, "'allreduce_in_flight.size' must be >= 2, got 1"),
    ],
)
def test_allreduces_in_flight_validation_names_the_field(key, value, message):
    doc = {**NETWORK, "allreduce_in_flight": IN_FLIGHT}
    with pytest.raises(ValueError) as e:
        NetworkFit.from_json(_bad(doc, ("allreduce_in_flight", key), value))
    assert message in str(e.value)


def _bad(base, path, value):
    d = copy.deepcopy(base)
    *parents, last = path
    target = d
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return d


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("model",), ..., "profile field 'model' is missing"),
        (("batch_size",), 0, "profile field 'batch_size' must be >= 1, got 0"),
        (("batch_size",), 2.5, "profile field 'batch_size' must be an integer"),
        (("batch_size",), True, "profile field 'batch_size' must be an integer"),
        (("forward_s",), -0.1, "profile field 'forward_s' must be >= 0.0, got -0.1"),
        (("backward_s",), float("nan"), "profile field 'backward_s' must be a finite number"),
        (("optimizer_s",), "fast", "profile field 'optimizer_s' must be a finite number"),
        (("device",), "", "profile field 'device' must be a non-empty string"),
        (("buckets",), [], "profile field 'buckets' must be a non-empty list"),
        (("buckets", 1, "index"), 0, "profile field 'buckets[1].index' repeats index 0"),
        (("buckets", 0, "bytes"), 0, "profile field 'buckets[0].bytes' must be >= 1, got 0"),
        (
            ("buckets", 1, "ready_s"),
            0.3,
            "profile field 'buckets[1].ready_s' must be <= backward_s",
        ),
        (("buckets", 1, "ready_s"), ..., "profile field 'buckets[1].ready_s' is missing"),
        (("buckets", 0), 7, "profile field 'buckets[0]' must be a JSON object"),
        (("param_bytes",), 299, "profile field 'buckets' holds 300 bytes, more than param_bytes"),
        (("memory_bytes",), -1, "profile field 'memory_bytes' must be >= 0"),
        (("per_parameter",), 1, "profile field 'per_parameter' must be true or false, got 1"),
    ],
)
def test_profile_validation_names_the_field(path, value, message):
    with pytest.raises(ValueError) as e:
        Profile.from_json(_bad(PROFILE, path, value))
    assert message in str(e.value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("p2p",), ..., "network field 'p2p' is missing"),
        (("p2p", "alpha_s"), -1e-6, "network field 'p2p.alpha_s' must be >= 0.0"),
        (("p2p", "beta_s_per_byte"), None, "network field 'p2p.beta_s_per_byte' must be a finite"),
        (("p2p", "r2"), 1.5, "network field 'p2p.r2' must be <= 1, got 1.5"),
        (("allreduce", "size"), ..., "network field 'allreduce.size' is missing"),
        (("allreduce", "size"), 0, "network field 'allreduce.size' must be >= 1, got 0"),
        (("source",), 3, "network field 'source' must be a non-empty string"),
    ],
)
def test_network_validation_names_the_field(path, value, message):
    with pytest.raises(ValueError) as e:
        NetworkFit.from_json(_bad(NETWORK, path, value))
    assert message in str(e.value)


def test_document_must_be_an_object_and_file_valid_json(tmp_path):
    with pytest.raises(ValueError, match="document must be a JSON object, got list"):
        Profile.from_json([])
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="profile file .* is not valid JSON"):
        Profile.load(bad)
    bad.write_text(json.dumps(NETWORK))
    assert NetworkFit.load(bad).source == "netfit on 8 ranks"
