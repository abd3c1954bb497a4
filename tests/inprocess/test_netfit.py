"""Network-fit sweeps and their assembly, in-process on the thread world (no launcher).

Thread-world times are dominated by the GIL, so these tests drive the sweeps with
deterministic fake timings; the real measurement runs under mpiexec in test_netfit_mpi.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.comm.local import run_ranks
from gossipgrad.tools.measure import netfit, sweeps
from gossipgrad.tools.plan.formats import NetworkFit

ALPHA, BETA = 4e-6, 1 / 5e9


def fake(alpha: float, beta: float, ranks: tuple[int, ...]):
    """A ``once`` factory: ranks in ``ranks`` report alpha + beta n (rank r adds r * 1 ns,
    so the maximum over ranks is visible), the others 0."""

    def factory(comm, *_args):
        def once(n: int) -> float:
            return alpha + beta * n + 1e-9 * comm.rank if comm.rank in ranks else 0.0

        return once

    return factory


def test_run_sweep_keeps_the_slowest_rank_and_stops_at_max_message_s():
    sizes = sweeps.message_sizes(4096, 1 << 20)

    def body(comm):
        once = fake(ALPHA, BETA, (0, 2))(comm)
        return sweeps.run_sweep(comm, sizes, 3, 60e-6, "median", once)

    results = run_ranks(3, body)
    assert results[0] == results[1] == results[2]
    s = results[0]
    # 256 KiB takes 4 + 52 = 56 us (kept), 512 KiB 109 us > 60 us: the last size measured
    assert s.nbytes == tuple(4096 * 2**i for i in range(8))
    assert s.seconds[0] == pytest.approx(ALPHA + BETA * 4096 + 2e-9)  # rank 2's time
    assert s.fit.alpha_s == pytest.approx(ALPHA + 2e-9, rel=1e-6)
    assert s.fit.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)


def test_run_sweep_grows_to_the_size_it_must_cover_with_few_reps_past_the_limit():
    sizes = sweeps.message_sizes(4096, 1 << 20)
    calls: list[int] = []

    def body(comm):
        inner = fake(ALPHA, BETA, (0, 1))(comm)

        def once(n: int) -> float:
            if comm.rank == 0:
                calls.append(n)
            return inner(n)

        return sweeps.run_sweep(comm, sizes, 5, 60e-6, "median", once, grow_to=1 << 20)

    s = run_ranks(2, body)[0]
    # 512 KiB is past 60 us but the sweep goes on to 1 MiB, the size it must cover
    assert s.nbytes == tuple(4096 * 2**i for i in range(9))
    assert calls.count(256 << 10) == 1 + 5  # within the limit: warm-up and every rep
    assert calls.count(512 << 10) == 1 + 5  # the first size past it still gets every rep
    assert calls.count(1 << 20) == 1 + sweeps.SLOW_REPS  # grown to: a few reps
    assert s.fit.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)


def test_message_sizes_and_peer_choice():
    assert sweeps.message_sizes(3000, 16384) == [4096, 8192, 16384]
    with pytest.raises(ValueError, match="at least two sizes"):
        sweeps.message_sizes(4096, 5000)
    with pytest.raises(ValueError, match="4 <= min"):
        sweeps.message_sizes(2, 5000)
    assert netfit.choose_peer([5, 5, 5, 8]) == 3
    assert netfit.choose_peer([5, 5, 5]) == 1
    assert (
        run_ranks(3, lambda c: netfit.host_ids(c).tolist())[0]
        == [run_ranks(1, lambda c: netfit.host_ids(c).tolist())[0][0]] * 3
    )


def test_measure_network_assembles_fits(monkeypatch):
    monkeypatch.setattr(sweeps, "pingpong", fake(ALPHA, BETA, (0,)))
    monkeypatch.setattr(sweeps, "exchange", fake(ALPHA, 2 * BETA, (0, 1)))
    monkeypatch.setattr(sweeps, "allreduce", fake(3 * ALPHA, 3 * BETA, (0, 1, 2)))
    monkeypatch.setattr(sweeps, "concurrent", fake(ALPHA, 4 * BETA, (0, 1, 2)))
    monkeypatch.setattr(sweeps, "allreduce_in_flight", fake(ALPHA, 2 * BETA, (0, 1, 2)))
    monkeypatch.setenv("GOSSIPGRAD_EMU_RATE", "1gbit")

    def body(comm):
        return netfit.measure_network(comm, max_bytes=1 << 20, reps=2, source="test")

    results = run_ranks(3, body)
    assert results[0] == results[1] == results[2]
    r = results[0]
    assert r.peer == 1 and r.same_host and r.hosts == 1
    assert r.network.p2p.alpha_s == pytest.approx(ALPHA, rel=1e-6)
    assert r.network.allreduce.size == 3
    assert r.network.allreduce.beta_s_per_byte == pytest.approx(3 * BETA, rel=1e-6)
    assert r.duplex == pytest.approx(2.0, rel=1e-6)
    assert r.network.concurrent.size == 3
    assert r.network.concurrent.beta_s_per_byte == pytest.approx(4 * BETA, rel=1e-6)
    assert r.network.ranks_per_node == 3  # threads of one process: one node
    ark = r.network.allreduce_in_flight
    assert (ark.size, ark.in_flight) == (3, netfit.DEFAULT_IN_FLIGHT)
    assert ark.beta_s_per_byte == pytest.approx(2 * BETA, rel=1e-6)
    assert "3 ranks on 1 host(s)" in r.network.source
    assert "emulated link rate 1gbit" in r.network.source and r.network.source.endswith("test")
    doc = json.loads(json.dumps(r.to_json()))
    assert NetworkFit.from_json(doc) == r.network  # extra keys are ignored by the planner
    assert doc["measurements"]["pingpong"]["nbytes"][-1] == 1 << 20
    assert doc["measurements"]["exchange_fit"]["duplex"] == pytest.approx(2.0, rel=1e-6)
    assert doc["allreduce_in_flight"]["in_flight"] == netfit.DEFAULT_IN_FLIGHT


def test_no_in_flight_sweep_when_asked_for_none(monkeypatch):
    for name in ("pingpong", "exchange", "allreduce", "concurrent"):
        monkeypatch.setattr(sweeps, name, fake(ALPHA, BETA, (0, 1)))

    def refuse(*_args):
        raise AssertionError("the in-flight sweep ran")

    monkeypatch.setattr(sweeps, "allreduce_in_flight", refuse)

    def body(comm):
        return netfit.measure_network(comm, max_bytes=1 << 16, reps=1, allreduce_in_flight=1)

    r = run_ranks(2, body)[0]
    assert r.network.allreduce_in_flight is None and r.allreduce_in_flight is None
    assert "allreduce_in_flight" not in r.to_json()
    assert r.network.allreduce is not None


def test_in_flight_allreduces_each_sum_their_own_slice_and_report_time_per_allreduce():
    k, count = 3, 256  # 3 allreduces of 1 KiB of float32 each

    def body(comm):
        buf = np.zeros(k * count * 2, dtype=np.float32)
        for i in range(k):
            buf[i * count : (i + 1) * count] = (comm.rank + 1) * (i + 1)
        t = sweeps.allreduce_in_flight(comm, buf, k)(4 * count)
        return t, buf.tolist()

    for t, buf in run_ranks(2, body):
        assert t > 0
        for i in range(k):  # ranks 1 and 2, times the slice's number: 3 (i + 1)
            assert buf[i * count : (i + 1) * count] == [3.0 * (i + 1)] * count
        assert buf[k * count :] == [0.0] * (k * count)  # only the k slices move
    with pytest.raises(ValueError, match="allreduces in flight must be >= 1"):
        sweeps.allreduce_in_flight(None, np.zeros(4, np.float32), 0)


def test_concurrent_sweep_moves_every_ranks_bytes_around_the_ring():
    def body(comm):
        send = np.full(4096, comm.rank + 1, dtype=np.uint8)
        recv = np.zeros(4096, dtype=np.uint8)
        t = sweeps.concurrent(comm, send, recv)(1024)
        return t, recv[:1024].tolist(), recv[1024:].tolist()

    for rank, (t, got, rest) in enumerate(run_ranks(3, body)):
        assert t > 0
        assert got == [(rank - 1) % 3 + 1] * 1024  # from the previous rank
        assert rest == [0] * (4096 - 1024)  # only n bytes move


def test_ranks_per_node_counts_the_busiest_node():
    assert netfit.ranks_per_node([7, 7, 9, 7]) == 3
    assert netfit.ranks_per_node([1, 2, 3]) == 1


def _flat_then(linear_from: int):
    """A ping-pong factory whose sweeps before number ``linear_from`` (0-based, per rank)
    take the same time at every size, as descheduled reps on a loaded host can make them
    look, and grow with size from then on."""
    made: dict[int, int] = {}

    def factory(comm, *_args):
        k = made[comm.rank] = made.get(comm.rank, -1) + 1
        flat = fake(1e-3, 0.0, (0,))(comm)
        return flat if k < linear_from else fake(ALPHA, BETA, (0,))(comm)

    return factory


def test_an_unfittable_ping_pong_is_measured_again_before_netfit_gives_up(monkeypatch):
    for name in ("exchange", "allreduce", "concurrent", "allreduce_in_flight"):
        monkeypatch.setattr(sweeps, name, fake(ALPHA, BETA, (0, 1)))
    monkeypatch.setattr(sweeps, "pingpong", _flat_then(1))

    def body(comm):
        return netfit.measure_network(comm, max_bytes=1 << 20, reps=2)

    first, second = run_ranks(2, body)
    assert first.network == second.network
    assert first.network.p2p.beta_s_per_byte == pytest.approx(BETA, rel=1e-6)  # the 2nd sweep

    monkeypatch.setattr(sweeps, "pingpong", _flat_then(netfit.PINGPONG_SWEEPS))
    with pytest.raises(ValueError, match=f"{netfit.PINGPONG_SWEEPS} sweeps: fitted beta"):
        run_ranks(2, body)


def test_a_link_too_slow_for_two_sizes_is_a_clear_error():
    def body(comm):
        return netfit.measure_network(comm, max_bytes=1 << 16, reps=1, max_message_s=1e-12)

    with pytest.raises(ValueError, match="nothing to fit; raise max_message_s"):
        run_ranks(2, body)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reps": 0}, "reps must be >= 1"),
        ({"stat": "mean"}, "stat must be one of median, min"),
        ({"peer": 2}, r"peer must be a rank in \[1, 2\)"),
        ({"max_message_s": 0}, "max_message_s must be > 0"),
        ({"allreduce_in_flight": -1}, "allreduces in flight must be an integer >= 0"),
    ],
)
def test_measure_network_validates_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_ranks(2, lambda c: netfit.measure_network(c, max_bytes=1 << 16, **kwargs))


def test_netfit_without_a_launcher_says_how_to_launch(monkeypatch):
    monkeypatch.setenv("GOSSIPGRAD_MPI", "0")
    res = CliRunner().invoke(main, ["netfit"])
    assert res.exit_code == 2
    assert "mpiexec -n 2 gossipgrad netfit" in res.output


def test_sweep_json_lists_relative_errors():
    s = sweeps.Sweep((4096, 8192), (1e-5, 2e-5), (1e-5, 2e-5), None, "why")
    assert s.to_json()["problem"] == "why"
    assert np.isclose(s.to_json()["seconds"][1], 2e-5)
