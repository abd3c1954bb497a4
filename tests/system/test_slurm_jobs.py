"""Slurm job templates and srun + MPI on a real single-node Slurm cluster.

    pytest -m slurm tests/system/test_slurm_jobs.py      # as root; brings Slurm up if needed

Tests marked `slurm` bring up the cluster with scripts/slurm-up.sh (see slurm_cluster.py)
and fail, never skip, when it cannot. The template checks that run the scripts outside
Slurm with a fake `srun`/`mpirun` need no cluster and are not marked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

try:
    from . import slurm_cluster
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    import slurm_cluster

REPO = slurm_cluster.REPO
JOBS = REPO / "jobs"
SBATCH_TEMPLATES = ["resnet50", "googlenet"]
VENV_BIN = Path(sys.executable).parent

# Run the templates on one 2-CPU node: these override their multi-node #SBATCH lines.
ONE_NODE_TWO_RANKS = [
    "--nodes=1",
    "--ntasks=2",
    "--ntasks-per-node=2",
    "--cpus-per-task=1",
    "--time=10",
]

# Would run `touch pwned` (in the job's directory), split a word or glob if a template
# mishandled it. Every test runs its script with cwd = tmp_path and checks tmp_path/pwned.
NASTY = "a b $(touch pwned) `touch pwned`; touch pwned *"

# Variables the templates read; cleared so the caller's environment cannot change results.
TEMPLATE_SETTINGS = {
    "DATA", "EPOCHS", "BATCH_SIZE", "LR", "WORKERS", "RUN_DIR", "EXTRA_ARGS",
    "GOSSIPGRAD", "VENV", "SRUN_MPI", "HOSTFILE", "NP", "ARCH", "MPIRUN",
}  # fmt: skip


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in TEMPLATE_SETTINGS or name.startswith(("SLURM_", "SBATCH_", "SRUN_")):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def slurm() -> None:
    slurm_cluster.ensure_slurm()


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny ImageFolder: DIR/{train,val}/<class>/*.jpg, 3 classes x 4 32x32 JPEGs."""
    from PIL import Image

    root = tmp_path_factory.mktemp("imagefolder")
    for split in ("train", "val"):
        for c, name in enumerate(("ant", "bee", "cat")):
            (root / split / name).mkdir(parents=True)
            for i in range(4):
                color = (80 * c, 60 * i, 255 - 80 * c)
                Image.new("RGB", (32, 32), color).save(root / split / name / f"{i}.jpg")
    return root


def write_script(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body).lstrip())
    path.chmod(0o755)
    return path


def read_argv(path: Path) -> list[str]:
    """Arguments a fake command recorded with `printf '%s\\0' "$@"`."""
    return path.read_bytes().decode().split("\0")[:-1]


# ------------------------------------------------------------------ srun + MPI


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_srun_starts_two_mpi_ranks(slurm: None, tmp_path: Path) -> None:
    """srun --mpi=pmi2 wires pip MPICH's mpi4py into one world of size 2."""
    script = write_script(
        tmp_path / "mpi.sbatch",
        f"""
        #!/bin/bash
        #SBATCH --ntasks=2
        #SBATCH --time=5
        srun --mpi=pmi2 {sys.executable} -c '
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        total = comm.allreduce(comm.Get_rank() + 1)
        print(f"rank {{comm.Get_rank()}} of {{comm.Get_size()}} sum {{total}}", flush=True)
        '
        """,
    )
    job = slurm_cluster.sbatch_and_wait(script, timeout=150, workdir=tmp_path)
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    assert "rank 0 of 2 sum 3" in job.stdout_text, job.stdout_text
    assert "rank 1 of 2 sum 3" in job.stdout_text, job.stdout_text


@pytest.mark.slurm
@pytest.mark.timeout(120)
def test_wait_job_cancels_a_job_at_its_deadline(slurm: None, tmp_path: Path) -> None:
    script = write_script(tmp_path / "sleep.sbatch", """
        #!/bin/bash
        #SBATCH --ntasks=1
        #SBATCH --time=5
        echo started
        sleep 300
    """)  # fmt: skip
    job_id, output = slurm_cluster.submit(script, workdir=tmp_path)
    with pytest.raises(TimeoutError, match=f"job {job_id} still"):
        slurm_cluster.wait_job(job_id, output, timeout=3)
    job = slurm_cluster.wait_job(job_id, output, timeout=60)
    assert job.state == "CANCELLED", job


# ------------------------------------------------------------------ templates, real training


@pytest.mark.slurm
@pytest.mark.timeout(600)
@pytest.mark.parametrize("arch", SBATCH_TEMPLATES)
def test_template_trains_two_steps(
    slurm: None, image_folder: Path, tmp_path: Path, arch: str
) -> None:
    """The template runs `gossipgrad train` on 2 ranks and the run reports top-1 accuracy."""
    env = {
        "DATA": str(image_folder),
        "EPOCHS": "1",
        "BATCH_SIZE": "2",
        "RUN_DIR": str(tmp_path / "run"),
        "EXTRA_ARGS": "--max-steps 2 --image-size 32 --no-progress",
        "GOSSIPGRAD": str(VENV_BIN / "gossipgrad"),
        "PYTHONPATH": str(REPO),  # this checkout's gossipgrad, whatever the venv has installed
        "OMP_NUM_THREADS": "1",
    }
    job = slurm_cluster.sbatch_and_wait(
        JOBS / f"{arch}.sbatch",
        env=env,
        timeout=540,
        sbatch_args=ONE_NODE_TWO_RANKS,
        workdir=tmp_path,
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    assert "step 2 (epoch 0.67): top1 " in job.stdout_text, job.stdout_text
    assert " top5 " in job.stdout_text, job.stdout_text
    assert (tmp_path / "run" / "ckpt-000000002.pt").is_file(), job.stdout_text


def _usr1_once(job_id: str, output: Path, ready, ready_s: float, end_s: float, what: str):
    """Wait up to ``ready_s`` for ``ready()`` (else cancel the job and fail with ``what``),
    send the batch script SIGUSR1, and return the job once it ended (within ``end_s``)."""
    deadline = time.monotonic() + ready_s
    while not ready():
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30, check=False)
            pytest.fail(f"{what} after {ready_s} s:\n{output.read_text()}")
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True, timeout=30)
    return slurm_cluster.wait_job(job_id, output, timeout=end_s)


@pytest.mark.slurm
@pytest.mark.timeout(600)
def test_usr1_checkpoints_real_training_and_resubmission_resumes(
    slurm: None, image_folder: Path, tmp_path: Path
) -> None:
    """`scancel --batch --signal=USR1` (what --signal=B:USR1@120 does before the time limit)
    stops both ranks at one step with a checkpoint and exit 0; resubmitting resumes there."""
    run_dir = tmp_path / "run"
    env = {
        "DATA": str(image_folder),
        "EPOCHS": "200",
        "BATCH_SIZE": "2",
        "RUN_DIR": str(run_dir),
        "EXTRA_ARGS": "--image-size 32 --no-progress -a resnet18",
        "GOSSIPGRAD": str(VENV_BIN / "gossipgrad"),
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    job_id, output = slurm_cluster.submit(
        JOBS / "resnet50.sbatch", env=env, sbatch_args=ONE_NODE_TWO_RANKS, workdir=tmp_path
    )
    # once the first epoch is done (a checkpoint): training runs
    job = _usr1_once(
        job_id, output, lambda: bool(list(run_dir.glob("ckpt-*.pt"))), 240, 120, "no checkpoint"
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    assert "SIGUSR1: stopping every rank at step " in job.stdout_text, job.stdout_text
    stop = int(job.stdout_text.split("SIGUSR1: stopping every rank at step ")[1].split()[0])
    assert (run_dir / f"ckpt-{stop:09d}.pt").is_file()

    env["EXTRA_ARGS"] += f" --max-steps {stop + 1}"
    again = slurm_cluster.sbatch_and_wait(
        JOBS / "resnet50.sbatch",
        env=env,
        timeout=240,
        sbatch_args=ONE_NODE_TWO_RANKS,
        workdir=tmp_path,
    )
    assert (again.state, again.exit_code) == ("COMPLETED", 0), again.stdout_text
    assert f"at step {stop} (epoch {stop // 3}, batch {stop % 3})" in again.stdout_text
    assert (run_dir / f"ckpt-{stop + 1:09d}.pt").is_file(), again.stdout_text


# ------------------------------------------------------------------ templates, quoting


FAKE_RECORDER = """
    #!/bin/bash
    # Records its argv NUL-separated, one file per rank, then exits 0.
    printf '%s\\0' "$@" > "$FAKE_OUT/argv.${SLURM_PROCID:-x}"
"""


@pytest.mark.parametrize("name", ["resnet50.sbatch", "googlenet.sbatch", "mpirun-hostfile.sh"])
def test_template_parses(name: str) -> None:
    subprocess.run(["bash", "-n", str(JOBS / name)], check=True, timeout=30)


def nasty_env(tmp_path: Path) -> dict[str, str]:
    return {
        "DATA": str(tmp_path / f"data {NASTY}"),
        "RUN_DIR": str(tmp_path / f"run {NASTY}"),
        "BATCH_SIZE": "32",
        "LR": "0.1;touch pwned",
        "EXTRA_ARGS": "--print-freq 1\n  $(touch pwned) *",
        "SLURM_JOB_NAME": NASTY,
    }


def expected_argv(env: dict[str, str], arch: str, gossipgrad: str, workers: str) -> list[str]:
    """What `gossipgrad` must receive for `nasty_env` and the templates' other defaults."""
    return [
        gossipgrad, "train", "-a", arch, "--data", env["DATA"], "--epochs", "90",
        "-b", "32", "--lr", env["LR"], "-j", workers, "--run-dir", env["RUN_DIR"],
        "--resume", "auto", "--print-freq", "1", "$(touch", "pwned)", "*",
    ]  # fmt: skip


def _run_with_fakes(
    script: Path, fake_bin: Path, tmp_path: Path, env: dict[str, str], **extra: str
) -> subprocess.CompletedProcess:
    """Run a job template with ``fake_bin`` (fake srun/mpirun writing to FAKE_OUT) first on
    PATH and ``env`` plus ``extra`` in its environment."""
    return subprocess.run(
        ["bash", str(script)],
        env={
            **os.environ,
            **env,
            "PATH": f"{fake_bin}:{os.environ['PATH']}",
            "FAKE_OUT": str(tmp_path),
            **extra,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("arch", SBATCH_TEMPLATES)
def test_sbatch_template_passes_values_verbatim(tmp_path: Path, arch: str) -> None:
    """Outside Slurm with a fake srun: every value arrives as one intact word, nothing runs."""
    pwned = tmp_path / "pwned"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    write_script(fake_bin / "srun", """
        #!/bin/bash
        printf '%s\\0' "$@" > "$FAKE_OUT/srun.argv"
    """)  # fmt: skip
    env = nasty_env(tmp_path)
    # GOSSIPGRAD must exist; the fake srun never runs it
    proc = _run_with_fakes(JOBS / f"{arch}.sbatch", fake_bin, tmp_path, env, GOSSIPGRAD="true")
    assert proc.returncode == 0, proc.stderr
    argv = read_argv(tmp_path / "srun.argv")
    assert argv[:2] == ["--mpi=pmi2", "--kill-on-bad-exit=1"]
    assert argv[2:] == expected_argv(env, arch, "true", "4")
    assert not pwned.exists()
    assert env["RUN_DIR"] in proc.stdout  # the resolved settings are printed
    assert Path(env["RUN_DIR"]).is_dir()


@pytest.mark.timeout(60)
def test_mpirun_template_passes_values_verbatim(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    write_script(fake_bin / "mpirun", """
        #!/bin/bash
        [[ "$1" == --version ]] && { echo "HYDRA build details:"; exit 0; }
        printf '%s\\0' "$@" > "$FAKE_OUT/mpirun.argv"
    """)  # fmt: skip
    hostfile = tmp_path / f"hosts {NASTY}"
    hostfile.write_text("localhost:2\n")
    env = nasty_env(tmp_path)
    proc = _run_with_fakes(
        JOBS / "mpirun-hostfile.sh",
        fake_bin,
        tmp_path,
        env,
        HOSTFILE=str(hostfile),
        NP="2",
        GOSSIPGRAD="gossipgrad",
    )
    assert proc.returncode == 0, proc.stderr
    argv = read_argv(tmp_path / "mpirun.argv")
    assert argv[:4] == ["-n", "2", "-f", str(hostfile)]
    assert argv[4:] == expected_argv(env, "resnet50", "gossipgrad", "4")
    assert not pwned.exists()


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_sbatch_template_quoting_under_real_srun(slurm: None, tmp_path: Path) -> None:
    """Through sbatch and srun, with a nasty job name, each rank receives the exact argv."""
    pwned = tmp_path / "pwned"
    fake = write_script(tmp_path / "fake gossipgrad", FAKE_RECORDER)
    env = nasty_env(tmp_path)
    del env["SLURM_JOB_NAME"]  # Slurm sets it from --job-name below
    job = slurm_cluster.sbatch_and_wait(
        JOBS / "resnet50.sbatch",
        env={**env, "GOSSIPGRAD": str(fake), "FAKE_OUT": str(tmp_path)},
        timeout=150,
        sbatch_args=[*ONE_NODE_TWO_RANKS, f"--job-name={NASTY}"],
        workdir=tmp_path,
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    want = expected_argv(env, "resnet50", str(fake), "1")[1:]  # WORKERS = cpus-per-task
    assert read_argv(tmp_path / "argv.0") == want
    assert read_argv(tmp_path / "argv.1") == want
    assert not pwned.exists()


# ------------------------------------------------------------------ signals


FAKE_TRAINER = """
    #!/bin/bash
    # Stands in for `gossipgrad train`: waits for SIGUSR1 and reports it once per rank.
    trap 'echo "rank $SLURM_PROCID got USR1"; exit 0' USR1
    trap 'echo "rank $SLURM_PROCID got TERM"; exit 0' TERM
    touch "$FAKE_OUT/ready.$SLURM_PROCID"
    for _ in $(seq 1200); do sleep 0.1; done   # traps run between sleeps
    echo "rank $SLURM_PROCID never signalled"
    exit 3
"""


@pytest.mark.slurm
@pytest.mark.timeout(180)
def test_sbatch_template_forwards_usr1_to_every_rank(slurm: None, tmp_path: Path) -> None:
    """SIGUSR1 for the batch shell (what --signal=B:USR1@120 sends) reaches each rank once."""
    fake = write_script(tmp_path / "fake-train", FAKE_TRAINER)
    job_id, output = slurm_cluster.submit(
        JOBS / "resnet50.sbatch",
        env={"GOSSIPGRAD": str(fake), "FAKE_OUT": str(tmp_path), "RUN_DIR": str(tmp_path)},
        sbatch_args=ONE_NODE_TWO_RANKS,
        workdir=tmp_path,
    )
    job = _usr1_once(
        job_id,
        output,
        lambda: all((tmp_path / f"ready.{r}").exists() for r in (0, 1)),
        120,
        60,
        "ranks not started",
    )
    assert (job.state, job.exit_code) == ("COMPLETED", 0), job.stdout_text
    for rank in (0, 1):
        assert job.stdout_text.count(f"rank {rank} got USR1") == 1, job.stdout_text
    assert "got TERM" not in job.stdout_text
