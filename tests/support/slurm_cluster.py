"""Real single-node Slurm for tests: bring it up once, submit batch scripts, wait for them.

    from slurm_cluster import ensure_slurm, sbatch_and_wait

    ensure_slurm()  # runs scripts/slurm-up.sh once per test session, or raises
    job = sbatch_and_wait(script, env={"EPOCHS": "1"}, timeout=120, sbatch_args=["-n", "2"])
    assert job.state == "COMPLETED" and job.exit_code == 0, job.stdout_text

Nothing here skips: if Slurm cannot be brought up, `ensure_slurm` raises
`SlurmUnavailable` with the log of scripts/slurm-up.sh, and the test fails with it.
Every wait has a deadline; a job still running at its deadline is cancelled.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
SLURM_UP = REPO / "scripts" / "slurm-up.sh"

#: Seconds allowed for scripts/slurm-up.sh, which may apt-get install Slurm on first use.
SLURM_UP_TIMEOUT = 900

#: Job states after which a job never runs again (see `man squeue`, JOB STATE CODES).
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    }
)

_POLL_S = 0.5


class SlurmUnavailable(RuntimeError):
    """The test cluster could not be brought up; the message holds slurm-up.sh's log."""


class JobResult(NamedTuple):
    """How a batch job ended. `exit_code` is the script's status, or 128 + signal."""

    job_id: str
    state: str
    exit_code: int
    stdout_text: str


_up: SlurmUnavailable | bool = False


def ensure_slurm() -> None:
    """Run scripts/slurm-up.sh once per process; raise `SlurmUnavailable` if it fails.

    A failure is remembered, so later tests fail at once with the same message instead of
    retrying a 60 s bring-up each.
    """
    global _up
    if _up is True:
        return
    if isinstance(_up, SlurmUnavailable):
        raise _up
    try:
        proc = subprocess.run(
            [str(SLURM_UP)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=SLURM_UP_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:
        _up = SlurmUnavailable(
            f"{SLURM_UP} did not finish in {SLURM_UP_TIMEOUT} s:\n{_text(exc.output)}"
        )
        raise _up from None
    if proc.returncode != 0:
        hint = "" if os.geteuid() == 0 else " (it must run as root: sudo scripts/slurm-up.sh)"
        _up = SlurmUnavailable(f"{SLURM_UP} exited with {proc.returncode}{hint}:\n{proc.stdout}")
        raise _up
    _up = True


def submit(
    script: Path,
    env: Mapping[str, str] | None = None,
    sbatch_args: Sequence[str] = (),
    workdir: Path | None = None,
) -> tuple[str, Path]:
    """Submit `script` with sbatch; return (job_id, path of its output file).

    `env` is added to this process's environment, which sbatch exports to the job.
    `workdir` (default: a new temporary directory) becomes the job's working and
    submit directory and holds the output file `slurm-<id>.out` (stdout and stderr),
    which overrides any `#SBATCH --output` in the script.
    """
    workdir = Path(workdir or tempfile.mkdtemp(prefix="slurm-job-"))
    out_pattern = workdir / "slurm-%j.out"
    proc = subprocess.run(
        ["sbatch", "--parsable", f"--output={out_pattern}", *sbatch_args, str(script)],
        env={**os.environ, **(env or {})},
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sbatch {script} failed with {proc.returncode}: {proc.stderr.strip()}")
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise RuntimeError(f"sbatch {script} printed no job id: {proc.stdout!r}")
    return job_id, workdir / f"slurm-{job_id}.out"


def job_fields(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict of its Key=Value fields (values with no spaces)."""
    proc = subprocess.run(
        ["scontrol", "--oneliner", "show", "job", job_id],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scontrol show job {job_id} failed: {proc.stderr.strip()}")
    return dict(re.findall(r"(\w+)=(\S*)", proc.stdout))


def wait_job(job_id: str, output: Path, timeout: float) -> JobResult:
    """Poll until job `job_id` reaches a final state; cancel it and raise after `timeout` s.

    Raises `TimeoutError` naming the job's last state and reason, with its output so far.
    """
    deadline = time.monotonic() + timeout
    while True:
        fields = job_fields(job_id)
        state = fields.get("JobState", "")
        if state in FINAL_STATES:
            return JobResult(job_id, state, _exit_code(fields["ExitCode"]), _read(output))
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job_id], timeout=30, check=False)
            raise TimeoutError(
                f"job {job_id} still {state} (reason {fields.get('Reason')}) after "
                f"{timeout} s; cancelled it. Output so far:\n{_read(output)}"
            )
        time.sleep(_POLL_S)


def sbatch_and_wait(
    script: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
    sbatch_args: Sequence[str] = (),
    workdir: Path | None = None,
) -> JobResult:
    """Submit `script` (see `submit`) and wait for it (see `wait_job`)."""
    job_id, output = submit(script, env, sbatch_args, workdir)
    return wait_job(job_id, output, timeout)


def _exit_code(field: str) -> int:
    """Slurm's ExitCode=<status>:<signal> as one shell-style number."""
    status, _, signal = field.partition(":")
    return 128 + int(signal) if signal and int(signal) else int(status)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no output file {path})"


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""
