"""Every strategy trains the default digits job under a real mpiexec, each run with a deadline.

gossip, allreduce and local are gossipgrad's own exchanges; horovod (``horovod.torch`` on
the same MPI world) and ddp (``DistributedDataParallel`` over gloo, rendezvous through MPI)
are the libraries' own allreduce. ``local`` never communicates while training; the trainer
still averages the model before every evaluation (once per epoch by default).
"""

from __future__ import annotations

import json
import re
import signal
import sys

import pytest

from launch import (
    HAVE_HOROVOD,
    gossipgrad,
    mpiexec,
    needs_horovod,
    run,
    signal_rank_in_training,
    stopped_rank_bound_s,
)

pytestmark = pytest.mark.mpi


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Run (size, strategy) once per module; return the summary record."""
    cache: dict[tuple[int, str], dict] = {}

    def get(size: int, strategy: str) -> dict:
        if (size, strategy) not in cache:
            out = tmp_path_factory.mktemp("run") / "metrics.jsonl"
            res = gossipgrad(
                size,
                ["train", "--strategy", strategy, "--no-progress", "--metrics-out", str(out)],
                timeout=280,
            )
            assert res.returncode == 0, res.stderr[-3000:]
            records = [json.loads(line) for line in open(out, encoding="utf-8")]
            summaries = [r for r in records if r.get("event") == "summary"]
            assert len(summaries) == 1, records[-3:]
            evals = [r for r in records if r.get("event") == "eval"]
            cache[(size, strategy)] = {**summaries[0], "_evals": evals}
        return cache[(size, strategy)]

    return get


STRATEGIES = [
    "gossip",
    "allreduce",
    "local",
    pytest.param("horovod", marks=[needs_horovod, pytest.mark.horovod]),
    "ddp",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_reaches_93_percent_on_four_ranks(trained, strategy):
    s = trained(4, strategy)
    assert s["strategy"] == strategy and s["size"] == 4 and s["steps"] == 220
    assert s["test_accuracy"] >= 0.93, s


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("wire", "copies"), [("fp32", 1.5), ("bf16", 1.25)])
def test_gossip_node_trains_two_nodes_of_two_and_counts_its_bytes(tmp_path, wire, copies):
    """--strategy gossip-node, 4 ranks as 2 nodes of 2 (GOSSIPGRAD_RANKS_PER_NODE): it
    reaches the band of the others, and each rank sends its node's other rank its shard
    and its mixed shard back (1/2 + 1/2 of the model, float32) and half the model to the
    other node (through the codec: bf16 halves it): 1.5 model copies a step, 1.25 in bf16."""
    out = tmp_path / "metrics.jsonl"
    res = gossipgrad(
        4,
        ["train", "--strategy", "gossip-node", "--wire", wire, "--no-progress",
         "--metrics-out", str(out)],
        timeout=280,
        GOSSIPGRAD_RANKS_PER_NODE="2",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "gossip-node: 2 nodes of 2 ranks" in res.stderr
    records = [json.loads(line) for line in open(out, encoding="utf-8")]
    s = next(r for r in records if r.get("event") == "summary")
    assert s["strategy"] == "gossip-node" and s["wire"] == wire, s
    assert s["test_accuracy"] >= 0.93, s
    assert s["bytes_sent_per_step"] == pytest.approx(copies * s["model_bytes"], rel=1e-3), s


@pytest.mark.timeout(300)
@pytest.mark.parametrize("strategy", [pytest.param("horovod", marks=needs_horovod), "ddp"])
def test_library_allreduce_keeps_ranks_identical_and_reports_ring_bytes(trained, strategy):
    s = trained(4, strategy)
    # Measured before every evaluation, not assumed: the parameters never drift apart.
    assert [e["consensus_distance"] for e in s["_evals"]] == [0.0] * 20
    assert s["bytes_sent_per_step"] == pytest.approx(2 * 3 / 4 * s["model_bytes"])


@needs_horovod
@pytest.mark.horovod
@pytest.mark.timeout(600)
def test_horovod_on_two_and_four_ranks_lands_in_the_same_band(trained):
    two, four = trained(2, "horovod"), trained(4, "horovod")
    assert two["test_accuracy"] >= 0.93 and four["test_accuracy"] >= 0.93
    assert abs(two["test_accuracy"] - four["test_accuracy"]) <= 0.02, (two, four)
    assert two["bytes_sent_per_step"] == two["model_bytes"]  # 2 (2-1)/2 = 1


@pytest.mark.timeout(600)
def test_ddp_on_two_ranks_takes_horovods_steps(trained):
    """Two ranks: both average exactly ((a + b) / 2 and a / 2 + b / 2 agree in binary
    floating point), so DDP and Horovod follow the same trajectory."""
    ddp = trained(2, "ddp")
    assert ddp["test_accuracy"] >= 0.93, ddp
    if HAVE_HOROVOD:
        hvd = trained(2, "horovod")
        assert ddp["test_loss"] == pytest.approx(hvd["test_loss"], rel=1e-6), (ddp, hvd)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("strategy", [pytest.param("horovod", marks=needs_horovod), "ddp"])
def test_a_stopped_rank_ends_the_library_strategies_within_the_deadline(tmp_path, strategy):
    """Rank 2 stops (SIGSTOP) mid-training: a deadline fires on the others (Horovod: our
    poll of its handles; DDP: the process group timeout; or the shuffle's own wait) and the
    job ends non-zero on every rank instead of hanging, with a message naming rank 2."""
    code, err, elapsed = signal_rank_in_training(
        tmp_path, signal.SIGSTOP, 5, ["--strategy", strategy], wait_s=60
    )
    assert code != 0
    assert elapsed <= stopped_rank_bound_s(5), elapsed
    # Which deadline fires first is a race: the library's (Horovod's handles, gloo's
    # "Timed out waiting 5000ms"), the background shuffle's, the per-step stop-signal
    # agreement's or the evaluation's allreduce. Whichever it is, the ranks probe each other
    # and the report names the rank that answers no probe (comm.collectives.report: a
    # point-to-point wait's peer may be a bystander), or the collective names the ranks that
    # did not arrive (rank 2, maybe with others stuck behind it).
    two = r"(rank 2|ranks [\d, ]*\b2\b[\d, ]*)"
    assert re.search(rf"{two} (did not arrive|answers? no probe)", err), err[-3000:]
    assert re.search(r"(is rank 2|are ranks [\d, ]*\b2\b[\d, ]*) alive\?", err), err[-3000:]


FORGOT_THE_WRAPPER = """
import torch, gossipgrad
comm = gossipgrad.init(timeout=20)
model = torch.nn.Linear(4, 2)
sgd = torch.optim.SGD(model.parameters(), lr=0.1)
opt = gossipgrad.DistributedOptimizer(sgd, model, comm, strategy="ddp")
opt.zero_grad()
opt.module_for_forward(torch.randn(3, 4)).sum().backward()
opt.step()  # through the wrapper: fine
opt.zero_grad()
model(torch.randn(3, 4)).sum().backward()  # the model itself: DDP averages nothing
try:
    opt.step()
except RuntimeError as exc:
    print("refused:", exc, flush=True)
opt.close()
"""


@pytest.mark.timeout(120)
def test_ddp_refuses_a_step_whose_forward_skipped_its_wrapper(tmp_path):
    """Forgetting module_for_forward (or an empty batch) would silently train without
    averaging under DDP; step() says so instead."""
    script = tmp_path / "forgot.py"
    script.write_text(FORGOT_THE_WRAPPER)
    out = run([mpiexec(), "-n", "2", sys.executable, str(script)], timeout=100)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("no forward pass went through DDP's wrapper this step") == 2, out.stdout
