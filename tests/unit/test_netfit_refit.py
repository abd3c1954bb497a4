"""``gossipgrad netfit --refit``: a saved document's fits recomputed from its recorded times
(no MPI: the CLI runs without a launch)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.tools.measure.refit import refit_network, stale_fit
from gossipgrad.tools.plan.formats import NetworkFit

SIZES = [4096 * 2**i for i in range(11)]  # 4 KiB .. 4 MiB
LINE_S, BURST_S = 8 / 100e6, 8 / 1e9  # 100 Mbit/s, and the shaper's burst at 1 Gbit/s


def shaped(alpha: float, per_rank: float = 1.0) -> list[float]:
    """A token-bucket link: up to 64 KiB at burst speed, larger messages at the line rate."""
    return [alpha + n * per_rank * (BURST_S if n <= 65536 else LINE_S) for n in SIZES]


def sweep(times: list[float]) -> dict:
    return {"nbytes": SIZES, "seconds": times, "min_seconds": times, "relative_error": []}


def document() -> dict:
    """A netfit document as an older fit wrote it: p2p at twice the line rate."""
    stale = {"alpha_s": 0.0, "beta_s_per_byte": LINE_S / 2, "r2": 0.6}
    return {
        "p2p": dict(stale),
        "allreduce": {**stale, "size": 4},
        "concurrent": {**stale, "size": 4},
        "allreduce_in_flight": {**stale, "size": 4, "in_flight": 4},
        "source": "netfit on test: emulated link rate 100mbit",
        "measurements": {
            "pingpong": sweep(shaped(50e-6)),
            "exchange": sweep(shaped(60e-6)),
            "exchange_fit": {**stale, "duplex": 1.0},
            "allreduce": sweep(shaped(200e-6, per_rank=1.5)),
            "concurrent": sweep(shaped(80e-6, per_rank=1.1)),
            "allreduce_in_flight": sweep(shaped(150e-6, per_rank=1.2)),
        },
    }


def test_refit_recovers_the_line_rate_from_the_recorded_times():
    out = refit_network(document())
    net = NetworkFit.from_json(out)
    assert 8 / net.p2p.beta_s_per_byte == pytest.approx(100e6, rel=0.02)
    assert net.p2p.alpha_s > 0 and net.p2p.r2 > 0.99
    assert net.allreduce.beta_s_per_byte == pytest.approx(1.5 * LINE_S, rel=0.02)
    assert net.concurrent.beta_s_per_byte == pytest.approx(1.1 * LINE_S, rel=0.02)
    assert net.allreduce_in_flight.beta_s_per_byte == pytest.approx(1.2 * LINE_S, rel=0.02)
    assert net.allreduce_in_flight.in_flight == 4
    assert out["measurements"]["exchange_fit"]["duplex"] == pytest.approx(1.0, rel=0.02)
    assert len(out["measurements"]["pingpong"]["relative_error"]) == len(SIZES)
    assert out["source"] == document()["source"] and "refit" in out


def test_refit_leaves_its_input_alone():
    doc = document()
    refit_network(doc)
    assert doc == document()


def test_a_document_without_recorded_times_is_refused():
    doc = document()
    del doc["measurements"]
    with pytest.raises(ValueError, match="no recorded ping-pong times.*measure again"):
        refit_network(doc, where="net.json")


def test_the_cli_refits_without_a_launch(tmp_path):
    src, dst = tmp_path / "old.json", tmp_path / "new.json"
    src.write_text(json.dumps(document()))
    result = CliRunner().invoke(main, ["netfit", "--refit", str(src), "--out", str(dst)])
    assert result.exit_code == 0, result.output
    assert 8 / NetworkFit.load(dst).p2p.beta_s_per_byte == pytest.approx(100e6, rel=0.02)
    assert f"refit {src}: p2p" in result.stderr and "-> 0.1 Gbit/s" in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"p2p": {}}', "no recorded ping-pong times"),
    ],
)
def test_the_cli_says_what_is_wrong_with_a_bad_file(tmp_path, text, message):
    src = tmp_path / "bad.json"
    src.write_text(text)
    result = CliRunner().invoke(main, ["netfit", "--refit", str(src)])
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output


def test_a_fit_that_disagrees_with_its_own_times_is_named():
    old = document()
    message = stale_fit(old, "net.json")
    assert message is not None and "net.json's ping-pong fit says 0.2 Gbit/s" in message
    assert "gossipgrad netfit --refit net.json" in message
    assert stale_fit(refit_network(old)) is None  # refitted: fit and times agree
    del old["measurements"]
    assert stale_fit(old) is None  # nothing recorded to compare with


def test_plan_warns_about_a_stale_network_file_and_still_plans(tmp_path):
    from gossipgrad.tools.plan.formats import Bucket, Profile

    mib = 1 << 20
    buckets = (Bucket(0, 2 * mib, 0.1), Bucket(1, 2 * mib, 0.2))
    Profile("toy", 32, "cpu", 0.1, 0.2, 0.05, 4 * mib, buckets).save(tmp_path / "profile.json")
    for name, doc in (("old.json", document()), ("new.json", refit_network(document()))):
        (tmp_path / name).write_text(json.dumps(doc))
        args = ["plan", "--profile", str(tmp_path / "profile.json"), "--network"]
        result = CliRunner().invoke(main, [*args, str(tmp_path / name), "--sizes", "4"])
        assert result.exit_code == 0, result.output
        assert ("warning:" in result.stderr) == (name == "old.json"), result.stderr
        assert "gossip" in result.stdout
