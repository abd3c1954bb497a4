"""SIGTERM mid-epoch, then ``--resume auto``: the same loss trajectory as an uninterrupted run.

Under real ``mpiexec -n 2`` on digits. Only rank 1 is signalled (twice: the handler must be
idempotent), so the ranks must agree on the step to stop at. Checkpoints average the model
and momentum, which changes the trajectory, so the uninterrupted reference run checkpoints
at the same steps (``--checkpoint-every S`` where S is the step the signal stopped at).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

try:
    from . import launch
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import launch

pytestmark = pytest.mark.mpi

STEPS = 160
STEPS_PER_EPOCH = 22  # digits: 1437 train images, 2 ranks, batch 32
ARGS = [
    "train",
    "--hidden",
    "1024",
    "--epochs",
    "20",
    "--max-steps",
    str(STEPS),
    "--print-freq",
    "1",
    "--no-progress",
    "--seed",
    "3",
]


def records(path: Path, event: str) -> dict[int, dict]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return {r["step"]: r for r in lines if r.get("event") == event}


def summary(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def wait_for_steps(path: Path, steps: int, proc, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and len(path.read_text().splitlines()) >= steps):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            pytest.fail(f"training did not reach step {steps}:\n{out}\n{err}")
        time.sleep(0.05)


@pytest.mark.timeout(420)
def test_sigterm_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    run_a, run_b = tmp_path / "a", tmp_path / "b"
    proc = launch.start_gossipgrad(
        2, [*ARGS, "--run-dir", str(run_a), "--metrics-out", str(tmp_path / "a.jsonl")]
    )
    wait_for_steps(tmp_path / "a.jsonl", 6, proc, timeout=120)
    pids = launch.rank_pids(proc.pid)
    assert sorted(pids) == [0, 1], pids
    launch.os.kill(pids[1], signal.SIGTERM)
    launch.os.kill(pids[1], signal.SIGTERM)
    stopped = launch.finish(proc, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "Traceback" not in stopped.stderr, stopped.stderr
    first = summary(stopped.stdout)
    stop = first["steps"]
    assert first["stopped"] == "SIGTERM" and 6 <= stop < STEPS, first
    assert stop % STEPS_PER_EPOCH, f"stopped at an epoch end ({stop}); the test wants mid-epoch"
    assert first["checkpoint"] == str(run_a / f"ckpt-{stop:09d}.pt")
    assert f"stopping every rank at step {stop}" in stopped.stderr

    resumed = launch.gossipgrad(
        2,
        [
            *ARGS,
            "--run-dir",
            str(run_a),
            "--resume",
            "auto",
            "--checkpoint-every",
            str(stop),
            "--metrics-out",
            str(tmp_path / "c.jsonl"),
        ],
        timeout=180,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"at step {stop} (epoch {stop // STEPS_PER_EPOCH}, batch " in resumed.stderr
    reference = launch.gossipgrad(
        2,
        [
            *ARGS,
            "--run-dir",
            str(run_b),
            "--checkpoint-every",
            str(stop),
            "--metrics-out",
            str(tmp_path / "b.jsonl"),
        ],
        timeout=180,
    )
    assert reference.returncode == 0, reference.stderr

    a, b = records(tmp_path / "a.jsonl", "log"), records(tmp_path / "b.jsonl", "log")
    c = records(tmp_path / "c.jsonl", "log")
    assert min(c) == stop + 1 and max(c) == STEPS, sorted(c)
    assert [a[s]["loss"] for s in range(1, stop + 1)] == [b[s]["loss"] for s in range(1, stop + 1)]
    for s in range(stop + 1, STEPS + 1):
        assert c[s]["loss"] == pytest.approx(b[s]["loss"], rel=1e-6, abs=1e-9), s
        assert c[s]["lr"] == b[s]["lr"], s
    evals_b, evals_c = records(tmp_path / "b.jsonl", "eval"), records(tmp_path / "c.jsonl", "eval")
    assert evals_c and set(evals_c) <= set(evals_b)
    for s, rec in evals_c.items():
        assert rec["top1"] == pytest.approx(evals_b[s]["top1"]), s
    assert summary(resumed.stdout)["top1"] == pytest.approx(summary(reference.stdout)["top1"])
