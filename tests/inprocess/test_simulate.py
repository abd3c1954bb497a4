"""The simulator in one process: its two engines agree (stack replicas against one real
``DistributedOptimizer`` per thread-rank), its shuffle is the worker's, and its command
prints what it says. The agreement with real ``mpiexec`` ranks: tests/mpi/test_simulate_mpi.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from gossipgrad import ExchangeOptions
from gossipgrad.comm.local import run_ranks
from gossipgrad.shuffle import ShardStore, ShuffleWorker
from gossipgrad.tools.cli.simulate import simulate as simulate_command
from gossipgrad.tools.simulate import ClockOptions, simulate, tasks
from gossipgrad.tools.simulate.data import Shards

TASK = tasks.templates(samples=2300)


@pytest.fixture(autouse=True)
def one_thread():
    """Small steps run fastest on one torch thread (on a busy host, several times over)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


LAGGY = ClockOptions(compute_s=0.05, jitter=0.3, stragglers=((1, 2.0),), link_gbit=1.0)


def both(size: int, **options):
    runs = [
        simulate(lambda: tasks.mlp(TASK, 12), TASK, size, engine=engine, **options)
        for engine in ("stack", "ranks")
    ]
    return runs


CASES = {  # name: (size, options); odd sizes run base2, whose ranks idle in some steps
    "bf16 param": (3, dict(mix="param", wire="bf16")),
    "fp8 grad, adaptive sync": (5, dict(mix="grad", wire="fp8", monitor_every=3)),
    "staleness 1, param": (5, dict(mix="param", staleness=1)),
    "staleness 1, allreduce": (3, dict(strategy="allreduce", staleness=1)),
    "adamw grad": (3, dict(mix="grad", optimizer="adamw", lr=0.003, sync="off")),
    "lag from the clock, param": (5, dict(mix="param", max_lag=2, clock=LAGGY)),
    "lag from the clock, grad": (3, dict(mix="grad", max_lag=2, staleness=1, clock=LAGGY)),
    "allreduce-param, sorted, shuffle": (
        5,
        dict(strategy="allreduce-param", partition="sorted", shuffle=True),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_stack_replicas_and_real_thread_ranks_agree(case):
    size, job = CASES[case]
    options = {"batch": 4, "steps": 9, "eval_every": 4, "lr": 0.05, "seed": 1, **job}
    stack, ranks = both(size, **options)
    np.testing.assert_allclose(stack.losses, ranks.losses, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(stack.ranks.numpy(), ranks.ranks.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stack.consensus.numpy(), ranks.consensus.numpy(), atol=1e-6)
    assert stack.summary["syncs"] == ranks.summary["syncs"]
    assert stack.records[-1]["accuracy"] == pytest.approx(ranks.records[-1]["accuracy"])
    if "clock" in job:  # the clock made a rank skip: both engines followed it
        assert stack.timeline.skipped.any()
        assert np.isnan(stack.losses).sum() == stack.timeline.skipped.sum()
    drift = max(r["distance"] for r in stack.records)  # the ranks' models did differ
    assert drift > 1e-7 or job.get("strategy", "").startswith("allreduce")


def test_the_simulated_shuffle_is_the_workers():
    size, every, steps = 4, 2, 13
    labels = np.arange(40 * size) % 10
    shards = Shards(labels, size, batch=4, seed=5, kind="sorted", shuffle=True, every=every)
    expected = []
    for t in range(steps):
        shards.on_step(t)
        expected.append(shards.ids.copy())

    def body(comm):
        ids = Shards(labels, size, batch=4, seed=5, kind="sorted").ids[comm.rank]
        store = ShardStore.of_indices(ids, labels[ids])
        seen = []
        with ShuffleWorker(store, comm, samples=8, every=every, seed=5) as worker:
            for t in range(steps):
                worker.on_step(t)
                seen.append(store.sample_ids())
        return seen

    real = run_ranks(size, body, timeout=60)
    for t in range(steps):
        assert np.stack([real[r][t] for r in range(size)]).tolist() == expected[t].tolist()


def test_the_command_prints_a_job_a_line_a_step_and_a_summary(tmp_path):
    save = tmp_path / "run.npz"
    result = CliRunner().invoke(
        simulate_command,
        "--size 4 --task templates:2200 --hidden 8 --batch 4 --steps 3 --eval-every 3 "
        f"--jitter 0.1 --straggler 1:2 --no-progress --out - --save {save}".split(),
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines[0]["event"] == "job" and lines[0]["size"] == 4
    assert [r["step"] for r in lines[1:-1]] == [1, 2, 3]
    assert {"loss", "distance", "time_s", "accuracy", "rank_accuracy_min"} <= set(lines[-2])
    assert lines[-1]["event"] == "summary" and lines[-1]["steps"] == 3
    saved = np.load(save)
    assert saved["losses"].shape == (3, 4) and saved["ranks"].shape[0] == 4


def test_a_bad_flag_is_one_line_that_says_what_to_do():
    result = CliRunner().invoke(
        simulate_command, "--size 3 --task templates:2200 --global-batch 8".split()
    )
    assert result.exit_code == 2
    assert "pick a multiple of 3" in result.output


def test_the_planner_takes_its_steps_to_accuracy_from_the_simulators_lines(tmp_path):
    """``gossipgrad plan --metrics`` reads simulated runs at the planned size
    (``--steps-at-size``): time to accuracy = the simulator's steps x the planner's step."""
    from gossipgrad.tools.plan.report import plan_report

    paths = []
    for strategy in ("gossip", "allreduce"):
        path = tmp_path / f"{strategy}.jsonl"
        run = simulate(
            lambda: tasks.mlp(TASK, 12),
            TASK,
            4,
            strategy=strategy,
            batch=4,
            steps=12,
            eval_every=3,
            lr=0.05,
            out=str(path),
        )
        paths.append(str(path))
        assert run.steps_to(0.09) == 3  # the first evaluation
    profile = tmp_path / "p.json"
    profile.write_text(
        json.dumps(
            {
                "model": "mlp",
                "batch_size": 4,
                "device": "cpu",
                "forward_s": 0.01,
                "backward_s": 0.02,
                "optimizer_s": 0.0,
                "param_bytes": 4096,
                "buckets": [{"index": 0, "bytes": 4096, "ready_s": 0.02}],
            }
        )
    )
    net = tmp_path / "n.json"
    net.write_text(json.dumps({"p2p": {"alpha_s": 1e-5, "beta_s_per_byte": 1e-9, "r2": 1.0}}))
    report = plan_report(
        profile, net, sizes=[4], metrics_path=paths, target_accuracy=0.09, steps_at_size=True
    )
    tta = report[report.index("Predicted time to test accuracy 0.09") :]
    for strategy in ("gossip", "allreduce"):
        assert f"| 4 | {strategy} | measured at 4 (1 runs) | their mean | 3.0 |" in tta


def test_the_default_timing_simulates_as_lockstep_and_local_steps_are_refused():
    """``early`` (the default) is lockstep's arithmetic: the same losses and models; the
    simulator does not model ``local:H`` and says so in one line."""
    options = {"batch": 4, "steps": 5, "eval_every": 5, "lr": 0.05, "seed": 1, "mix": "param"}
    make = lambda: tasks.mlp(TASK, 12)  # noqa: E731
    default = simulate(make, TASK, 3, **options)
    lockstep = simulate(make, TASK, 3, timing="lockstep", **options)
    assert ExchangeOptions().timing == "early"
    np.testing.assert_array_equal(default.losses, lockstep.losses)
    np.testing.assert_array_equal(default.ranks.numpy(), lockstep.ranks.numpy())
    with pytest.raises(ValueError, match="the simulator runs the timings early, lockstep") as exc:
        simulate(make, TASK, 3, timing="local:2", **options)
    assert "\n" not in str(exc.value)
