"""Hostile cases for ``gossipgrad train`` under the MPICH launcher: each one a bad option,
file, environment, data set, checkpoint, disk, signal or rank, and what the job did.

    python scripts/hostile.py                       # every case, a markdown table on stdout
    python scripts/hostile.py --only fifo,sigint    # cases whose name contains a pattern
    python scripts/hostile.py --code /tmp/base      # another checkout's gossipgrad (before/after)
    python scripts/hostile.py --json out.json       # also the records, one per case
    python scripts/hostile.py --report before.json after.json   # the two as one table

A case passes when the job ends (no hang: every launch has a deadline), with the exit status
the case expects, without a Python traceback, and with the message the case expects (the
guarantees of docs/guarantees.md). ``named`` marks the cases of issue 24; the others were
added while fixing them. Some cases mount a tmpfs (root only); without root they are skipped.
Runs one case at a time, at most 4 ranks, so that it can share a small machine.
"""

# Over 300 lines on purpose: one self-contained catalogue of hostile cases, each a few lines,
# with the runner that judges them; a user runs it as one file.

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "support"))
sys.path.insert(0, str(REPO / "scripts"))

from procs import rank_pids  # noqa: E402

QUICK = ["--no-progress", "--epochs", "1", "--comm-timeout", "20"]
LONG = ["--no-progress", "--epochs", "1000", "--comm-timeout", "20", "--print-freq", "1"]


@dataclass
class Outcome:
    rc: int | None  # None: killed at the deadline (a hang)
    seconds: float
    out: str
    err: str
    notes: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.out + self.err

    @property
    def last(self) -> str:
        lines = [ln for ln in self.err.splitlines() if ln.strip() and not ln.startswith("=")]
        return lines[-1][:160] if lines else ""


@dataclass
class Case:
    name: str
    named: bool
    body: Callable[[Path, Runner], Outcome]
    expect: Callable[[Outcome], str | None]  # None: as it should be, else what is wrong


class Runner:
    def __init__(self, code: Path, deadline: float) -> None:
        self.code, self.deadline = code, deadline
        self.mpiexec = str(Path(sys.executable).with_name("mpiexec"))

    def env(self, **extra: str) -> dict[str, str]:
        e = dict(os.environ)
        e["PYTHONPATH"] = str(self.code)
        e["OMP_NUM_THREADS"] = "1"
        e.update(extra)
        return e

    def cmd(self, n: int, args: list[str], env: dict[str, str] | None = None) -> list[str]:
        part = [sys.executable, "-m", "gossipgrad", "train", *args]
        if not n:
            return part
        extra = [x for k, v in (env or {}).items() for x in ("-env", k, v)]
        return ["-n", str(n), *extra, *part]

    def launch(
        self,
        parts: list[tuple[int, list[str], dict[str, str] | None]],
        act: Callable[[subprocess.Popen, float], None] | None = None,
        deadline: float | None = None,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Outcome:
        """``mpiexec PART : PART ...``; ``act(proc, t0)`` runs while it runs (signals)."""
        cmd = [self.mpiexec]
        for i, (n, args, penv) in enumerate(parts):
            cmd += ([":"] if i else []) + self.cmd(n, args, penv)
        return self.spawn(cmd, act, deadline, env, stdin)

    def spawn(self, cmd, act=None, deadline=None, env=None, stdin=subprocess.DEVNULL) -> Outcome:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**(env or {})),
            cwd=str(self.code),  # python -m puts the working directory first on sys.path
            stdin=stdin,
            start_new_session=True,
        )
        notes: list[str] = []
        try:
            if act is not None:
                act(proc, t0)
            out, err = proc.communicate(timeout=deadline or self.deadline)
            return Outcome(proc.returncode, time.monotonic() - t0, out, err, notes)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return Outcome(None, time.monotonic() - t0, out, err, ["hung: killed at the deadline"])
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def train(self, n: int, args: list[str], **kw) -> Outcome:
        return self.launch([(n, args, None)], **kw)


def wait_for(path: Path, proc: subprocess.Popen, lines: int = 1, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not (path.exists() and len(path.read_text().splitlines()) >= lines):
        if proc.poll() is not None or time.monotonic() > deadline:
            return
        time.sleep(0.1)


def signal_rank(rank: int | None, sig: int, after: Path, times: int = 1, gap: float = 0.3):
    """An ``act``: once ``after`` has a line, send ``sig`` to ``rank`` (None: the launcher)."""

    def act(proc: subprocess.Popen, _t0: float) -> None:
        wait_for(after, proc, 2)
        time.sleep(0.5)
        pid = proc.pid if rank is None else rank_pids(proc.pid).get(rank)
        for i in range(times):
            if pid is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                time.sleep(gap if i < times - 1 else 0)
        act.sent = time.monotonic()  # type: ignore[attr-defined]

    return act


# -- expectations -------------------------------------------------------------------------


def fails(*needles: str, within: float | None = None, code: int | None = None):
    """The job ends non-zero (``code`` if given), within ``within`` seconds, with no
    traceback and every needle in its output."""

    def check(o: Outcome) -> str | None:
        if o.rc is None:
            return "hang"
        if o.rc == 0:
            return "exit 0"
        if code is not None and o.rc != code:
            return f"exit {o.rc}, not {code}"
        if "Traceback" in o.err:
            return "traceback"
        if "Assertion failed" in o.err or "internal ABORT" in o.err:
            return "MPI assertion"
        missing = [n for n in needles if n not in o.text]
        if missing:
            return f"message lacks {missing[0]!r}"
        if within is not None and o.seconds > within:
            return f"took {o.seconds:.0f} s (> {within:g})"
        return None

    return check


def succeeds(*needles: str, check: Callable[[Outcome], str | None] | None = None):
    def expect(o: Outcome) -> str | None:
        if o.rc is None:
            return "hang"
        if o.rc != 0:
            return f"exit {o.rc}: {o.last}"
        if "Traceback" in o.err:
            return "traceback"
        missing = [n for n in needles if n not in o.text]
        if missing:
            return f"output lacks {missing[0]!r}"
        return check(o) if check is not None else None

    return expect


def one_line(o: Outcome, needle: str) -> str | None:
    count = sum(needle in ln for ln in o.err.splitlines())
    return None if count == 1 else f"{needle!r} on {count} lines"


# -- the cases ----------------------------------------------------------------------------


def images(tmp: Path, name: str = "data") -> Path:
    from imagefolder import make_image_folder

    return make_image_folder(tmp / name)


TINY_IMG = ["-a", "resnet18", "--image-size", "32", "-b", "2", "-j", "0"]


def case_flag(*args: str, needle: str, named: bool = False, n: int = 2) -> Case:
    return Case(
        "flag " + " ".join(args),
        named,
        lambda tmp, r: r.train(n, [*QUICK, *args]),
        fails(needle, within=40),
    )


def config_case(name: str, text: str, needle: str, suffix: str = ".toml", named=False) -> Case:
    def body(tmp: Path, r: Runner) -> Outcome:
        path = tmp / f"c{suffix}"
        path.write_text(text)
        return r.train(2, [*QUICK, "--config", str(path)])

    return Case("config " + name, named, body, fails(needle, within=40))


def env_case(name: str, var: str, value: str, needle: str, named=False, one_rank=False) -> Case:
    def body(tmp: Path, r: Runner) -> Outcome:
        if one_rank:  # a per-node difference: one rank of two sees it
            return r.launch([(1, QUICK, None), (1, QUICK, {var: value})], deadline=90)
        return r.train(2, QUICK, env={var: value}, deadline=90)

    return Case(name, named, body, fails(needle, within=40))


def mpmd_case(name: str, extra: list[str], needle: str, named=True, within: float = 40) -> Case:
    """Rank 0 gets the plain flags, rank 1 ``extra`` as well (one MPMD part each)."""

    def body(tmp: Path, r: Runner) -> Outcome:
        return r.launch([(1, QUICK, None), (1, [*QUICK, *extra], None)], deadline=90)

    return Case(name, named, body, fails(needle, within=within))


def resume_case(name: str, then: list[str], expect, first: list[str] | None = None, named=True):
    def body(tmp: Path, r: Runner) -> Outcome:
        run = tmp / "run"
        a = r.train(2, [*QUICK, "--run-dir", str(run), *(first or [])])
        if a.rc != 0:
            a.notes.append("first run failed")
            return a
        before = sorted(p.name for p in run.glob("ckpt-*.pt"))
        o = r.train(2, [*QUICK, "--epochs", "3", "--run-dir", str(run), "--resume", "auto", *then])
        after = sorted(p.name for p in run.glob("ckpt-*.pt"))
        o.notes.append(f"checkpoints before {before}, after {after}")
        bad = _nonfinite_checkpoints(run)
        if bad:
            o.notes.append(f"non-finite checkpoints: {bad}")
        return o

    def check(o: Outcome) -> str | None:
        if any(n.startswith("non-finite") for n in o.notes):
            return o.notes[-1]
        return expect(o)

    return Case(name, named, body, check)


def _nonfinite_checkpoints(run: Path) -> list[str]:
    import torch

    bad = []
    for p in sorted(run.glob("ckpt-*.pt")):
        if ".rank" in p.name:
            continue
        state = torch.load(p, weights_only=True)
        if any(not torch.isfinite(t).all() for t in state["model"].values()):
            bad.append(p.name)
    return bad


def nan_checkpoint(tmp: Path, r: Runner) -> Outcome:
    import torch

    run = tmp / "run"
    a = r.train(2, [*QUICK, "--run-dir", str(run)])
    if a.rc != 0:
        return a
    latest = sorted(p for p in run.glob("ckpt-*.pt") if ".rank" not in p.name)[-1]
    state = torch.load(latest, weights_only=True)
    first = next(iter(state["model"]))
    state["model"][first][0] = float("nan")
    torch.save(state, latest)
    return r.train(2, [*QUICK, "--epochs", "3", "--run-dir", str(run), "--resume", "auto"])


class Evil:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, ("echo pwned > " + str(self.path),))


def malicious_checkpoint(tmp: Path, r: Runner, plain_pickle: bool = False) -> Outcome:
    import pickle

    import torch

    run = tmp / "run"
    run.mkdir()
    obj = {"format": "gossipgrad-checkpoint", "x": Evil(tmp / "pwned")}
    if plain_pickle:
        with open(run / "ckpt-000000010.pt", "wb") as f:
            pickle.dump(obj, f)
    else:
        torch.save(obj, run / "ckpt-000000010.pt")
    o = r.train(2, [*QUICK, "--run-dir", str(run), "--resume", "auto"])
    if (tmp / "pwned").exists():
        o.notes.append("the file's code ran")
    return o


def metrics_on_resume(tmp: Path, r: Runner) -> Outcome:
    run, m = tmp / "run", tmp / "m.jsonl"
    a = r.train(2, [*QUICK, "--run-dir", str(run), "--metrics-out", str(m), "--print-freq", "2"])
    n1 = len(m.read_text().splitlines()) if m.exists() else 0
    o = r.train(
        2,
        [*QUICK, "--epochs", "2", "--run-dir", str(run), "--resume", "auto"]
        + ["--metrics-out", str(m), "--print-freq", "2"],
    )
    n2 = len(m.read_text().splitlines()) if m.exists() else 0
    o.notes.append(f"records after the first run {n1}, after the resumed run {n2}")
    if a.rc or n2 <= n1:
        o.notes.append("history lost")
    return o


def strict_json(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    o = r.train(2, [*QUICK, "--lr", "1e30", "--metrics-out", str(m), "--print-freq", "1"])
    for line in (m.read_text().splitlines() if m.exists() else []) + o.out.splitlines():
        if line.startswith("{"):
            try:
                json.loads(line, parse_constant=_refuse)
            except ValueError as exc:
                o.notes.append(f"not strict JSON: {exc}")
                break
    return o


def _refuse(token: str):
    raise ValueError(f"bare {token}")


def fifo_in_data(ranks: int):
    def body(tmp: Path, r: Runner) -> Outcome:
        data = images(tmp)
        os.mkfifo(data / "train" / "bee" / "9.jpg")
        return r.train(ranks, [*TINY_IMG, "--data", str(data), *QUICK], deadline=120)

    return body


def per_rank_data(change: Callable[[Path], None]):
    def body(tmp: Path, r: Runner) -> Outcome:
        a, b = images(tmp, "a"), images(tmp, "b")
        change(b)
        common = [*TINY_IMG, *QUICK]
        return r.launch(
            [(1, [*common, "--data", str(a)], None), (1, [*common, "--data", str(b)], None)],
            deadline=120,
        )

    return body


def rename_class(root: Path) -> None:
    for split in ("train", "val"):
        (root / split / "cat").rename(root / split / "cow")


def fewer_images(root: Path) -> None:
    (root / "train" / "ant" / "0.jpg").unlink()
    (root / "train" / "ant" / "1.jpg").unlink()


def extra_class(root: Path) -> None:
    for split in ("train", "val"):
        shutil.copytree(root / split / "cat", root / split / "dog")


def two_jobs(tmp: Path, r: Runner) -> Outcome:
    run = tmp / "run"
    first = subprocess.Popen(
        [r.mpiexec, *r.cmd(2, [*LONG, "--run-dir", str(run), "--checkpoint-every", "5"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=r.env(),
        cwd=str(r.code),
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(run.glob("ckpt-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.2)
        o = r.train(2, [*QUICK, "--epochs", "3", "--run-dir", str(run), "--checkpoint-every", "3"])
        o.notes.append(f"first job still running: {first.poll() is None}")
        return o
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


def stale_lock(tmp: Path, r: Runner) -> Outcome:
    run = tmp / "run"
    first = r.train(2, [*LONG, "--run-dir", str(run)], act=_kill_all_after(tmp), deadline=120)
    o = r.train(2, [*QUICK, "--epochs", "30", "--run-dir", str(run), "--resume", "auto"])
    o.notes.append(f"first job: exit {first.rc}")
    return o


def _kill_all_after(tmp: Path):
    def act(proc, _t0):
        deadline = time.monotonic() + 120
        while not list((tmp / "run").glob("ckpt-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)

    return act


def sigint(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    act = signal_rank(None, signal.SIGINT, m)
    o = r.train(4, [*LONG, "--metrics-out", str(m)], act=act, deadline=60)
    o.notes.append(f"{time.monotonic() - getattr(act, 'sent', time.monotonic()):.1f} s after")
    return o


def sigint_one_rank(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    return r.train(4, [*LONG, "--metrics-out", str(m)], act=signal_rank(2, signal.SIGINT, m))


def sigterm_twice(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    act = signal_rank(None, signal.SIGTERM, m, times=2, gap=0.05)
    return r.train(2, [*LONG, "--metrics-out", str(m), "--run-dir", str(tmp / "run")], act=act)


def sigterm_rank_thrice(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    act = signal_rank(1, signal.SIGTERM, m, times=3, gap=0.2)
    return r.train(2, [*LONG, "--metrics-out", str(m)], act=act)


def stopped_rank(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    o = r.train(
        4,
        [*LONG, "--metrics-out", str(m), "--comm-timeout", "10"],
        act=signal_rank(2, signal.SIGSTOP, m),
        deadline=90,
    )
    return o


def killed_rank(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    return r.train(4, [*LONG, "--metrics-out", str(m)], act=signal_rank(1, signal.SIGKILL, m))


def tmpfs(tmp: Path, size: str = "300k", ro: bool = False) -> Path | None:
    mnt = tmp / "mnt"
    mnt.mkdir()
    opts = f"size={size}" + (",ro" if ro else "")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(mnt)]).returncode:
        return None
    return mnt


def unmount(mnt: Path) -> None:
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def full_disk(tmp: Path, r: Runner) -> Outcome:
    mnt = tmpfs(tmp, "150k")
    if mnt is None:
        return Outcome(0, 0, "", "", ["skipped: cannot mount (not root)"])
    try:
        o = r.train(2, [*QUICK, "--hidden", "256", "--run-dir", str(mnt / "run")])
        o.notes.append(f"left: {sorted(p.name for p in (mnt / 'run').glob('*'))}")
        return o
    finally:
        unmount(mnt)


def full_disk_later(tmp: Path, r: Runner) -> Outcome:
    """Room for the first checkpoints, not for later ones: the earlier ones must survive."""
    mnt = tmpfs(tmp, "1200k")
    if mnt is None:
        return Outcome(0, 0, "", "", ["skipped: cannot mount (not root)"])
    try:
        run = mnt / "run"
        o = r.train(
            2,
            [*QUICK, "--hidden", "64", "--epochs", "3", "--run-dir", str(run)],
            act=_fill_after_first_checkpoint(run, mnt),
        )
        o.notes.append(f"left: {sorted(p.name for p in run.glob('*'))}")
        return o
    finally:
        unmount(mnt)


def _fill_after_first_checkpoint(run: Path, mnt: Path):
    def act(proc, _t0):
        deadline = time.monotonic() + 120
        while not list(run.glob("ckpt-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        with contextlib.suppress(OSError), open(mnt / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)

    return act


def read_only(tmp: Path, r: Runner) -> Outcome:
    mnt = tmpfs(tmp, "1m", ro=True)
    if mnt is None:
        return Outcome(0, 0, "", "", ["skipped: cannot mount (not root)"])
    try:
        return r.train(2, [*QUICK, "--run-dir", str(mnt / "run")])
    finally:
        unmount(mnt)


def run_dir_vanishes(tmp: Path, r: Runner) -> Outcome:
    run = tmp / "run"

    def act(proc, _t0):
        deadline = time.monotonic() + 120
        while not list(run.glob("ckpt-*.pt")) and time.monotonic() < deadline:
            time.sleep(0.05)
        while run.exists() and time.monotonic() < deadline:  # files appear while it goes
            shutil.rmtree(run, ignore_errors=True)

    args = [*LONG, "--epochs", "40", "--run-dir", str(run), "--checkpoint-every", "4"]
    return r.train(2, args, act=act)


def metrics_dir_is_file(tmp: Path, r: Runner) -> Outcome:
    (tmp / "f").write_text("x")
    return r.train(2, [*QUICK, "--metrics-out", str(tmp / "f" / "m.jsonl")])


def fresh_run_over_old(tmp: Path, r: Runner) -> Outcome:
    run = tmp / "run"
    a = r.train(2, [*QUICK, "--epochs", "3", "--run-dir", str(run)])
    before = sorted(p.name for p in run.glob("ckpt-*.pt"))
    o = r.train(2, [*QUICK, "--run-dir", str(run)])
    after = sorted(p.name for p in run.glob("ckpt-*.pt"))
    o.notes.append(f"first exit {a.rc}; checkpoints before {before}, after {after}")
    if not set(before) <= set(after):
        o.notes.append("the earlier run's checkpoints were deleted")
    return o


def uneven_shards(tmp: Path, r: Runner) -> Outcome:
    from imagefolder import make_image_folder

    data = make_image_folder(tmp / "d", per_class=4)  # 12 images
    (data / "train" / "ant" / "3.jpg").unlink()  # 11: shards of 6 and 5
    return r.train(2, [*TINY_IMG, "-b", "3", "--data", str(data), *QUICK, "--epochs", "2"])


def mpi_init_missing_rank(tmp: Path, r: Runner) -> Outcome:
    """One MPMD part is not gossipgrad at all and ends before MPI starts."""
    cmd = [r.mpiexec, *r.cmd(1, QUICK), ":", "-n", "1", sys.executable, "-c", "raise SystemExit(3)"]
    return r.spawn(cmd, deadline=200)


def metrics_is_a_directory(tmp: Path, r: Runner) -> Outcome:
    (tmp / "m.jsonl").mkdir()
    return r.train(2, [*QUICK, "--metrics-out", str(tmp / "m.jsonl")])


def _first_run(tmp: Path, r: Runner) -> tuple[Path, Outcome]:
    run = tmp / "run"
    return run, r.train(2, [*QUICK, "--run-dir", str(run)])


def rank_file_missing(tmp: Path, r: Runner) -> Outcome:
    run, a = _first_run(tmp, r)
    for p in run.glob("ckpt-*.rank1.pt"):
        p.unlink()
    o = r.train(2, [*QUICK, "--epochs", "2", "--run-dir", str(run), "--resume", "auto"])
    o.notes.append(f"first exit {a.rc}")
    return o


def truncated_checkpoint(tmp: Path, r: Runner) -> Outcome:
    run, _ = _first_run(tmp, r)
    latest = sorted(p for p in run.glob("ckpt-*.pt") if ".rank" not in p.name)[-1]
    latest.write_bytes(latest.read_bytes()[:1000])
    return r.train(2, [*QUICK, "--epochs", "2", "--run-dir", str(run), "--resume", "auto"])


def sigusr1_one_rank(tmp: Path, r: Runner) -> Outcome:
    m = tmp / "m.jsonl"
    act = signal_rank(1, signal.SIGUSR1, m)
    return r.train(2, [*LONG, "--metrics-out", str(m), "--run-dir", str(tmp / "run")], act=act)


def forced_mpi_without_launcher(tmp: Path, r: Runner) -> Outcome:
    return r.spawn(r.cmd(0, QUICK), env={"GOSSIPGRAD_MPI": "1"}, deadline=120)


PROBLEMS = ("history lost", "were deleted", "the file's code ran", "not strict JSON")


def no_notes(o: Outcome) -> str | None:
    bad = [n for n in o.notes if any(p in n for p in PROBLEMS)]
    return bad[0] if bad else None


def no_blame(o: Outcome) -> str | None:
    return "blames a rank" if "did not arrive" in o.err or "is rank" in o.err else None


def no_unsafe_hint(o: Outcome) -> str | None:
    return "suggests weights_only=False" if "weights_only=False" in o.text else None


def both(*checks):
    def check(o: Outcome) -> str | None:
        for c in checks:
            why = c(o)
            if why:
                return why
        return None

    return check


CASES: list[Case] = [
    # 1. non-finite numbers
    case_flag("--lr", "nan", needle="--lr", named=True),
    case_flag("--lr", "inf", needle="--lr", named=True),
    case_flag("--momentum", "nan", needle="--momentum", named=True),
    config_case("lr = 1e400", "lr = 1e400\n", "lr", named=True),
    case_flag("--wd", "-inf", needle="--weight-decay"),
    case_flag("--warmup-epochs", "nan", needle="--warmup-epochs"),
    case_flag("--sync-threshold", "inf", needle="--sync-threshold"),
    case_flag("--bucket-mb", "nan", needle="--bucket-mb"),
    case_flag("--comm-timeout", "inf", needle="--comm-timeout"),
    case_flag("--comm-timeout", "nan", needle="--comm-timeout"),
    case_flag("--partition", "dirichlet:nan", needle="--partition"),
    resume_case("resume --lr inf", ["--lr", "inf"], fails("--lr")),
    resume_case("resume --lr 1e30 (diverges)", ["--lr", "1e30"], fails("diverged", "step")),
    Case(
        "fresh --lr 1e30 (diverges)",
        False,
        lambda t, r: r.train(2, [*QUICK, "--lr", "1e30"]),
        fails("diverged", "step", within=60),
    ),
    Case("checkpoint with NaN weights", True, nan_checkpoint, fails("not finite")),
    Case("metrics strict JSON", True, strict_json, no_notes),
    # 2. every failure ends the job promptly
    mpmd_case("bad flag on one MPMD part", ["--bogus-flag"], "--bogus-flag", within=40),
    mpmd_case("bad value on one MPMD part", ["--lr", "-1"], "--lr", within=40),
    env_case(
        "junk runtime variable on one rank",
        "GOSSIPGRAD_PROGRESS_BURST",
        "many",
        "GOSSIPGRAD_PROGRESS_BURST",
        named=True,
        one_rank=True,
    ),
    env_case(
        "junk training variable on one rank",
        "GOSSIPGRAD_HIDDEN",
        "two",
        "GOSSIPGRAD_HIDDEN",
        one_rank=True,
    ),
    Case(
        "tiny --comm-timeout",
        True,
        lambda t, r: r.train(4, [*QUICK, "--comm-timeout", "1e-6"]),
        fails("rank", within=60),
    ),
    Case("Ctrl-C (SIGINT to mpiexec)", True, sigint, both(fails(code=130, within=30), no_blame)),
    Case("SIGINT to one rank", False, sigint_one_rank, fails(code=130, within=30)),
    Case("SIGTERM twice to mpiexec", True, sigterm_twice, succeeds("SIGTERM")),
    Case("SIGTERM three times to one rank", False, sigterm_rank_thrice, succeeds("SIGTERM")),
    Case("one MPMD part is not gossipgrad", False, mpi_init_missing_rank, fails(within=190)),
    # 3. ranks agree before they spend
    mpmd_case("--arch differs", ["--arch", "cnn"], "--arch"),
    mpmd_case("--hidden differs", ["--hidden", "64"], "--hidden"),
    mpmd_case("--dataset differs", ["--dataset", "templates"], "--dataset"),
    mpmd_case("--mix differs", ["--mix", "grad"], "--mix"),
    mpmd_case("--max-lag differs", ["--max-lag", "1"], "--max-lag"),
    mpmd_case("--lr differs", ["--lr", "0.2"], "--lr", named=False),
    mpmd_case("--seed differs", ["--seed", "5"], "--seed", named=False),
    mpmd_case("--strategy differs", ["--strategy", "allreduce"], "--strategy", named=False),
    Case(
        "renamed class folder on one rank",
        True,
        per_rank_data(rename_class),
        fails("class", within=60),
    ),
    Case("fewer images on one rank", True, per_rank_data(fewer_images), fails("images", within=60)),
    Case("extra class on one rank", True, per_rank_data(extra_class), fails("class", within=60)),
    Case("uneven shards (11 images, 2 ranks, -b 3)", False, uneven_shards, succeeds()),
    # 4. no wait without a deadline
    Case(
        "FIFO in --data, 1 rank",
        True,
        lambda t, r: fifo_in_data(0)(t, r),
        fails("9.jpg", within=60),
    ),
    Case("FIFO in --data, 2 ranks", True, fifo_in_data(2), fails("9.jpg", within=60)),
    Case("SIGSTOP one rank", True, stopped_rank, fails("rank 2", within=60)),
    Case("SIGKILL one rank", False, killed_rank, fails(within=30)),
    # 5. nothing lost
    Case("metrics on --resume", True, metrics_on_resume, both(succeeds(), no_notes)),
    Case("two jobs on one --run-dir", True, two_jobs, fails("in use", within=60)),
    Case("stale lock of a killed job", False, stale_lock, succeeds("resumed")),
    Case(
        "fresh run over an old run's checkpoints",
        False,
        fresh_run_over_old,
        both(fails("--resume"), no_notes),
    ),
    Case("full disk from the start", False, full_disk, fails("no space left", within=60)),
    Case("disk fills after a checkpoint", False, full_disk_later, fails("No space left")),
    Case("read-only --run-dir", False, read_only, fails("Read-only", within=60)),
    Case("--run-dir deleted mid-run", False, run_dir_vanishes, fails("run")),
    Case("--metrics-out under a file", False, metrics_dir_is_file, fails("m.jsonl", within=60)),
    # 6. user errors are one line
    config_case("TOML syntax error", "lr = = 1\n", "c.toml"),
    config_case("YAML syntax error", "lr: [1\n", "c.yaml", ".yaml"),
    config_case("wrong type: epochs = 1.5", "epochs = 1.5\n", "epochs"),
    config_case("wrong type: hidden = [1, 2]", "hidden = [1, 2]\n", "hidden"),
    config_case("wrong type: lr = 'fast'", 'lr = "fast"\n', "lr"),
    config_case("wrong type: shuffle = 3", "shuffle = 3\n", "shuffle"),
    config_case("unknown key", "learning_rate = 0.1\n", "learning_rate"),
    config_case("not a table (YAML list)", "- 1\n- 2\n", "c.yaml", ".yaml"),
    env_case(
        "junk runtime variable",
        "GOSSIPGRAD_PROGRESS_BURST",
        "many",
        "GOSSIPGRAD_PROGRESS_BURST",
        named=True,
    ),
    env_case("junk GOSSIPGRAD_MPI", "GOSSIPGRAD_MPI", "maybe", "GOSSIPGRAD_MPI"),
    env_case(
        "junk GOSSIPGRAD_INJECT_KILL", "GOSSIPGRAD_INJECT_KILL", "x:y", "GOSSIPGRAD_INJECT_KILL"
    ),
    env_case("junk GOSSIPGRAD_LR", "GOSSIPGRAD_LR", "nan", "--lr"),
    Case(
        "malicious checkpoint",
        True,
        malicious_checkpoint,
        both(fails("posix.system"), no_notes, no_unsafe_hint),
    ),
    Case(
        "malicious checkpoint, plain pickle",
        False,
        lambda t, r: malicious_checkpoint(t, r, plain_pickle=True),
        both(fails("cannot read checkpoint"), no_notes, no_unsafe_hint),
    ),
    Case(
        "--metrics-out is a directory", False, metrics_is_a_directory, fails("m.jsonl", within=60)
    ),
    Case("a rank's checkpoint part deleted", False, rank_file_missing, fails("rank1.pt")),
    Case("truncated checkpoint", False, truncated_checkpoint, fails("cannot read checkpoint")),
    Case("SIGUSR1 to one rank", False, sigusr1_one_rank, succeeds("SIGUSR1")),
    Case("GOSSIPGRAD_MPI=1 without a launcher", False, forced_mpi_without_launcher, succeeds()),
    case_flag("--resume", "/nonexistent.pt", needle="/nonexistent.pt"),
    case_flag("--data", "/nonexistent", needle="/nonexistent"),
    case_flag("--epochs", "0", needle="--epochs"),
    case_flag("-b", "100000", needle="--batch-size"),
    case_flag("--topology", "hypercube", needle="hypercube", n=3),
]


def report(before: list[str], after: str) -> str:
    """A markdown table: each case with how it ended before (the first record of it in the
    ``before`` files) and after."""

    def load(path: str) -> dict[str, dict]:
        return {r["case"]: r for r in json.loads(Path(path).read_text())}

    old: dict[str, dict] = {}
    for path in before:
        for name, rec in load(path).items():
            old.setdefault(name, rec)
    new = load(after)
    rows = [
        "| case | named | before: exit, s, verdict | after: exit, s, verdict | after: the line |",
        "|---|---|---|---|---|",
    ]

    def cell(rec: dict | None) -> str:
        if rec is None:
            return "not run"
        rc = "hang" if rec["rc"] is None else rec["rc"]
        return f"{rc}, {rec['seconds']:.0f} s, {rec['verdict']}".replace("|", "/")

    for case in CASES:
        a = new.get(case.name)
        line = (a or {}).get("last", "").replace("|", "/")
        named = "yes" if case.named else ""
        rows.append(f"| {case.name} | {named} | {cell(old.get(case.name))} | {cell(a)} | {line} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--report",
        nargs="+",
        metavar="JSON",
        help="print the before/after table of earlier --json files (the last one: after)",
    )
    ap.add_argument("--only", default="", help="comma-separated name fragments")
    ap.add_argument("--code", default=str(REPO), help="checkout whose gossipgrad runs")
    ap.add_argument("--deadline", type=float, default=150.0, help="seconds per launch")
    ap.add_argument("--json", default=None)
    ap.add_argument("--start", default="", help="skip the cases before this one")
    a = ap.parse_args()
    if a.report:
        print(report(a.report[:-1], a.report[-1]))
        return
    runner = Runner(Path(a.code), a.deadline)
    wanted = [p for p in a.only.split(",") if p]
    rows, records = [], []
    start = next((i for i, c in enumerate(CASES) if a.start and a.start in c.name), 0)
    for case in CASES[start:]:
        if wanted and not any(w in case.name for w in wanted):
            continue
        with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
            try:
                o = case.body(Path(tmp), runner)
            except Exception as exc:  # noqa: BLE001 - the harness's own failure, recorded
                o = Outcome(None, 0.0, "", f"harness: {type(exc).__name__}: {exc}", ["harness"])
        skipped = any(n.startswith("skipped") for n in o.notes)
        why = None if skipped else case.expect(o)
        verdict = "skipped" if skipped else ("ok" if why is None else f"BAD: {why}")
        rc = "hang" if o.rc is None else str(o.rc)
        row = f"| {case.name} | {'yes' if case.named else ''} | {rc} | {o.seconds:.1f} | "
        row += f"{verdict} | {o.last.replace('|', '/')} |"
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
        records.append(
            {
                "case": case.name,
                "named": case.named,
                "rc": o.rc,
                "seconds": o.seconds,
                "verdict": verdict,
                "last": o.last,
                "notes": o.notes,
                "stderr": o.err[-4000:],
            }
        )
    print("| case | named | exit | s | verdict | last line of stderr |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
