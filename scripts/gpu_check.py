#!/usr/bin/env python3
"""One-shot GPU check: CUDA-aware detection, GPU gossip exchange, throughput, offload, stand-in.

    python scripts/gpu_check.py                  # prints one JSON object; exit 1 on a failure
    python scripts/gpu_check.py --steps 20 --batch 64 --exchange-mb 64
    python scripts/gpu_check.py --standin-out "$OUT/standin"     # keep the measured profiles

What it runs (the driver itself never initialises MPI; it launches the checks):

1. ``detect`` (``mpiexec -n 1``): :func:`gossipgrad.comm.mpi.cuda_aware` and the MPI library.
2. ``exchange`` (``mpiexec -n 2``), once per path: a gossip exchange of CUDA tensors through
   the communication thread, as training does, checked exactly against ``(own + peer) / 2``
   and timed. ``staging`` always (pinned host buffers); ``direct`` (device pointers to MPI)
   only when step 1 found the library CUDA-aware, else it is skipped with the reason.
3. ``throughput`` (one process): ResNet-50 on synthetic 224x224 images, ``--batch`` per
   step, ``--steps`` timed steps after warm-up, plain and through DistributedOptimizer
   (strategy local), images/s.
4. ``offload`` (one process): the same model's peak device memory and images/s with
   ``--offload`` none, activations, optimizer and both (GeePS-style memory management), and
   each one's peak relative to none; the first step's loss must be the same in all four.
5. ``standin`` (one process per model of ``--standin-archs``, default ResNet-50, GoogLeNet,
   VGG-16): a measured stand-in profile (``gossipgrad profile --layers``) per precision
   (fp32, bf16) and batch (32, 64), written to ``--standin-out``; then each profile's
   stand-in runs on this host's CPU, one rank, strategy local, dilated by K =
   ``--standin-dilate`` (10), more where a dilated step would still be under 0.5 s (a fast
   GPU's step is shorter than the stand-in's own host work per step, which does not
   dilate, so it is checked as it is used), and undilated (recorded, not judged). Passes
   when the dilated stand-in's step is the GPU's x K within 5 %; gradient-ready errors and
   CPU per step are reported.

Without a CUDA device everything is skipped with a clear reason and the exit code is 0. The
workers also run on CPU (``_exchange --device cpu`` forces the staging path onto host
tensors), which is how the tests exercise this script without a GPU.
"""

# Over 300 lines on purpose: the one prepared script for a GPU session; it must run from a bare
# checkout in one call, so its checks live together.

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def cuda_status() -> dict[str, Any]:
    """What torch sees; ``available`` False with a ``reason`` when there is no usable GPU."""
    try:
        import torch
    except ImportError as exc:
        return {"available": False, "reason": f"torch is not importable: {exc}"}
    status: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    if torch.version.cuda is None:
        return {
            **status,
            "available": False,
            "reason": "this torch build has no CUDA support (CPU-only wheel)",
        }
    if not torch.cuda.is_available():
        return {
            **status,
            "available": False,
            "reason": "no CUDA device visible: torch.cuda.is_available() is False "
            "(no GPU, no driver, or CUDA_VISIBLE_DEVICES hides it)",
        }
    return {
        **status,
        "available": True,
        "devices": torch.cuda.device_count(),
        "device_name": torch.cuda.get_device_name(0),
    }


def plan(cuda: dict[str, Any], cuda_aware: bool | None) -> dict[str, str | None]:
    """Which checks run: check name -> None (run) or the reason it is skipped."""
    if not cuda.get("available"):
        reason = f"skipped: {cuda.get('reason', 'no CUDA device')}"
        return {
            "detect": reason,
            "staging": reason,
            "direct": reason,
            "throughput": reason,
            "offload": reason,
            "standin": reason,
        }
    direct = (
        None
        if cuda_aware
        else (
            "skipped: the MPI library is not CUDA-aware (no 'cuda' in mpi_memory_alloc_kinds); "
            "device tensors go through pinned host buffers. Set GOSSIPGRAD_CUDA_AWARE=1 to force "
            "the direct path with a CUDA-aware MPI"
        )
    )
    return {
        "detect": None,
        "staging": None,
        "direct": direct,
        "throughput": None,
        "offload": None,
        "standin": None,
    }


def _mpiexec() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else (shutil.which("mpiexec") or "mpiexec")


def _launch(n: int, args: list[str], timeout: float) -> dict[str, Any]:
    """Run this script's worker ``args`` (under ``mpiexec -n n`` when n); its last JSON line."""
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    if n:
        cmd = [_mpiexec(), "-n", str(n), *cmd]
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        out = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"{' '.join(args[:1])} did not finish within {timeout} s"}
    for line in reversed(out.stdout.splitlines()):
        if line.startswith("{"):
            rec = json.loads(line)
            rec.setdefault("ok", out.returncode == 0)
            return rec
    return {
        "ok": False,
        "error": f"exit {out.returncode}, no JSON; stderr tail: {out.stderr[-2000:]}",
    }


# Over 60 lines on purpose: the checks' order (detect, then each worker launch) is the report's.
def run_checks(args: argparse.Namespace) -> dict[str, Any]:
    cuda = cuda_status()
    report: dict[str, Any] = {"cuda": cuda}
    todo = plan(cuda, None)
    if todo["detect"] is not None:
        report.update(skipped=True, reason=todo["detect"], ok=True)
        return report
    report["detect"] = _launch(1, ["_detect"], args.timeout)
    todo = plan(cuda, bool(report["detect"].get("cuda_aware")))
    report["exchange"] = {}
    for path in ("staging", "direct"):
        if todo[path] is not None:
            report["exchange"][path] = {"skipped": True, "reason": todo[path]}
            continue
        report["exchange"][path] = _launch(
            2,
            ["_exchange", "--path", path, "--device", "cuda", "--mb", str(args.exchange_mb)],
            args.timeout,
        )
    report["throughput"] = _launch(
        0,
        [
            "_throughput",
            "--batch",
            str(args.batch),
            "--steps",
            str(args.steps),
            "--arch",
            args.arch,
        ],
        args.timeout,
    )
    report["offload"] = _launch(
        0,
        ["_offload", "--batch", str(args.batch), "--steps", str(args.steps), "--arch", args.arch],
        args.timeout,
    )
    report["standin"] = {
        arch: _launch(
            0,
            [
                "_standin",
                "--arch",
                arch,
                "--steps",
                str(args.standin_steps),
                "--dilate",
                str(args.standin_dilate),
                "--out",
                args.standin_out,
            ],
            args.timeout,
        )
        for arch in args.standin_archs.split(",")
        if arch
    }
    parts = [
        report["detect"],
        report["throughput"],
        report["offload"],
        *report["exchange"].values(),
        *report["standin"].values(),
    ]
    report["ok"] = all(p.get("ok", False) or p.get("skipped", False) for p in parts)
    return report


def worker_detect() -> dict[str, Any]:
    from gossipgrad.comm.mpi import cuda_aware, library_version

    return {
        "ok": True,
        "cuda_aware": cuda_aware(),
        "mpi": library_version(),
        "override": os.environ.get("GOSSIPGRAD_CUDA_AWARE"),
    }


# Over 60 lines on purpose: the exchange, its bit check and its timing share the buffers.
def worker_exchange(path: str, device: str, mb: float, reps: int = 5) -> dict[str, Any]:
    """2+ ranks: gossip-exchange ``mb`` MiB of ``device`` tensors in 4 buckets, as training
    does (communication thread), check the bits, time it."""
    import torch

    from gossipgrad.comm.codecs import Codec
    from gossipgrad.comm.collectives import allreduce_
    from gossipgrad.comm.mpi import MpiCommunicator, node_local_rank
    from gossipgrad.comm.schedule import Schedule
    from gossipgrad.comm.staging import Stager
    from gossipgrad.comm.transport import PeerTransport
    from gossipgrad.engine.bucket.mixer import BucketMixer
    from gossipgrad.engine.bucket.rules import Average
    from gossipgrad.engine.commthread import CommThread
    from gossipgrad.tools.bench.exchange import exchange_buckets, split_buckets

    comm = MpiCommunicator(timeout=120)
    if device == "cuda":
        dev = torch.device("cuda", node_local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        stager = Stager(cuda_aware=(path == "direct"))
    else:  # CPU rehearsal: force the staging copies onto host tensors
        dev = torch.device("cpu")
        stager = Stager(cuda_aware=False, force=(path == "staging"))
    schedule = Schedule(comm.size, "auto", seed=0)
    mixer = BucketMixer(PeerTransport(comm, schedule, stager), Codec(), Average())
    thread = CommThread(mixer, comm.timeout)
    numel = max(4, int(mb * 2**20) // 4)
    flat = torch.empty(numel, device=dev)
    buckets = split_buckets(flat, -(-numel // 4) * flat.element_size())  # 4, as 4 hooks would
    times, exact = [], True
    try:
        for step in range(reps + 1):
            flat.copy_(torch.arange(numel, device=dev, dtype=torch.float32) % 1000 + comm.rank)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            comm.barrier()
            t0 = time.perf_counter()
            exchange_buckets(thread, buckets, step)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            dt = time.perf_counter() - t0
            src = schedule.peers(comm.rank, step).src
            expect = (
                torch.arange(numel, device=dev, dtype=torch.float32) % 1000 + (comm.rank + src) / 2
            )
            exact = exact and bool(torch.equal(flat, expect))
            if step:
                times.append(dt)
    finally:
        thread.close()
    all_exact = int(allreduce_(comm, torch.tensor([int(exact)]))[0]) == comm.size
    seconds = statistics.median(times)
    return {
        "ok": all_exact,
        "path": path,
        "device": str(dev),
        "bytes": numel * 4,
        "buckets": len(buckets),
        "exact": all_exact,
        "seconds": round(seconds, 6),
        "gbit_per_s": round(numel * 4 * 8 / seconds / 1e9, 3),
        "rank": comm.rank,
    }


def worker_throughput(arch: str, batch: int, steps: int, device: str = "cuda") -> dict[str, Any]:
    """Images/s of ``arch`` on synthetic data: plain torch, then via DistributedOptimizer."""
    import torch

    from gossipgrad.comm.local import LocalWorld
    from gossipgrad.models import build_model
    from gossipgrad.strategies import build_optimizer

    dev = torch.device(device)
    torch.manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (batch,), device=dev)
    out: dict[str, Any] = {
        "ok": True,
        "arch": arch,
        "batch": batch,
        "steps": steps,
        "device": str(dev),
    }
    for mode in ("plain", "engine"):
        model = build_model(arch, (3, 224, 224), 1000).to(dev)
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if mode == "engine":
            comm = LocalWorld(1).communicators()[0]
            opt = build_optimizer(opt, model, comm, strategy="local")
        sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
        for i in range(3 + steps):
            if i == 3:
                sync()
                t0 = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        sync()
        seconds = (time.perf_counter() - t0) / steps
        out[mode] = {"step_s": round(seconds, 5), "images_per_s": round(batch / seconds, 1)}
        if mode == "engine":
            opt.close()
    return out


OFFLOAD_MODES = ("none", "activations", "optimizer", "activations,optimizer")


# Over 60 lines on purpose: one loop over the offload modes on the same weights and batch.
def worker_offload(
    arch: str, batch: int, steps: int, device: str = "cuda", image_size: int = 224
) -> dict[str, Any]:
    """Peak device memory and images/s of ``arch`` with each ``--offload`` mode (one model
    per mode, the same weights and batch); ratios to ``none``. On a CPU peak memory is None."""
    import torch

    from gossipgrad.engine.offload import Offloads, offloading
    from gossipgrad.models import build_model

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    x = torch.randn(batch, 3, image_size, image_size, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 1000, (batch,), generator=torch.Generator().manual_seed(1))
    x, y = x.to(dev), y.to(dev)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    modes: dict[str, Any] = {}
    for mode in OFFLOAD_MODES:
        torch.manual_seed(0)
        model = build_model(arch, (3, image_size, image_size), 1000).to(dev)
        what = () if mode == "none" else tuple(mode.split(","))
        plan = Offloads(model, dev, what, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
        if cuda:
            sync()
            torch.cuda.reset_peak_memory_stats(dev)
        first = None
        for i in range(2 + steps):
            if i == 2:
                sync()
                t0 = time.perf_counter()
            plan.optimizer.zero_grad()
            with offloading(plan.activations):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
            plan.optimizer.step()
            first = float(loss.detach()) if first is None else first
        sync()
        seconds = (time.perf_counter() - t0) / steps
        modes[mode] = {
            "images_per_s": round(batch / seconds, 1),
            "first_loss": first,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(dev) if cuda else None,
            **{k: v for k, v in plan.report().items() if k != "what"},
        }
        del model, plan
        if cuda:
            torch.cuda.empty_cache()
    base = modes["none"]
    for rec in modes.values():
        rec["images_per_s_vs_none"] = round(rec["images_per_s"] / base["images_per_s"], 3)
        rec["peak_vs_none"] = (
            round(rec["peak_memory_bytes"] / base["peak_memory_bytes"], 3) if cuda else None
        )
    same = all(
        abs(m["first_loss"] - base["first_loss"]) <= 1e-5 * abs(base["first_loss"])
        for m in modes.values()
    )
    return {
        "ok": same,
        "same_first_loss": same,
        "arch": arch,
        "batch": batch,
        "steps": steps,
        "image_size": image_size,
        "device": str(dev),
        "modes": modes,
    }


STANDIN_PRECISIONS = ("fp32", "bf16")
STANDIN_BATCHES = (32, 64)


# Over 60 lines on purpose: per (precision, batch): measure, save, stand in, compare, in order.
def worker_standin(
    arch: str,
    steps: int,
    dilate: float,
    out_dir: str,
    device: str = "cuda",
    precisions: tuple[str, ...] = STANDIN_PRECISIONS,
    batches: tuple[int, ...] = STANDIN_BATCHES,
    image_size: int = 224,
    min_step_s: float = 0.5,
) -> dict[str, Any]:
    """Measure ``arch``'s stand-in profile per precision and batch on ``device``, save each,
    then time its stand-in on the CPU (one rank, local) dilated (by ``dilate``, more if
    needed for a step of ``min_step_s``) and at 1."""
    import math

    import torch

    from gossipgrad.comm.local import LocalWorld
    from gossipgrad.tools.bench.standin import run_standin
    from gossipgrad.tools.devices import StandinProfile
    from gossipgrad.tools.measure.layers import profile_arch_layers
    from gossipgrad.tools.measure.profiler import ArchRun

    os.makedirs(out_dir, exist_ok=True)
    gpu = (torch.cuda.get_device_name(0) if device == "cuda" else "cpu").split()[-1].lower()
    profiles = []
    for precision in precisions:
        for batch in batches:
            run = ArchRun(
                arch,
                batch,
                device=device,
                steps=max(steps, 10),  # medians of the device's phases and layers
                warmup=5,
                image_size=image_size,
            )
            prof = profile_arch_layers(
                run,
                precision,
                command=f"scripts/gpu_check.py _standin --arch {arch} (batch {batch})",
            )
            path = os.path.join(out_dir, f"{arch}-{gpu}-{precision}-b{batch}.json")
            prof.save(path)
            profiles.append((precision, batch, path, StandinProfile.load(path)))
            if device == "cuda":
                torch.cuda.empty_cache()
    rows = []
    comm = LocalWorld(1).communicators()[0]
    for precision, batch, path, prof in profiles:
        row: dict[str, Any] = {
            "precision": precision,
            "batch": batch,
            "profile": path,
            "device_step_s": prof.compute_s,
            "layers_coverage": prof.source["layers_coverage"],
        }
        # dilated until a step takes min_step_s: a fast GPU's step is shorter than the
        # stand-in's own host work per step (zeroing buckets, Python), which does not dilate
        k = max(dilate, math.ceil(min_step_s / prof.compute_s))
        row["dilate"] = k
        for name, factor in (("dilated", k), ("undilated", 1.0)):
            rec = run_standin(comm, prof, factor, ("local",), steps=steps, reps=2, warmup=1)
            local = rec["results"][0]
            row[name] = {
                "standin_step_s": local["step_s"],
                "ratio": local["ratio_to_profile"],
                "ready": local["ready"],
                "cpu_s_per_step": local["cpu_s_per_step"],
            }
        ratio = row["dilated"]["ratio"]
        row["within_5pct"] = ratio is not None and abs(ratio - 1) <= 0.05
        rows.append(row)
    return {"ok": all(r["within_5pct"] for r in rows), "arch": arch, "device": device, "rows": rows}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--batch", type=int, default=64, help="images per step")
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--exchange-mb", type=float, default=64.0)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per check")
    parser.add_argument("--standin-archs", default="resnet50,googlenet,vgg16")
    parser.add_argument("--standin-steps", type=int, default=3, help="timed steps per block")
    parser.add_argument("--standin-dilate", type=float, default=10.0)
    parser.add_argument("--standin-out", default="standin-profiles", help="profiles go here")
    if argv and argv[0].startswith("_"):
        worker = argparse.ArgumentParser()
        worker.add_argument("--path", default="staging")
        worker.add_argument("--device", default="cuda")
        worker.add_argument("--mb", type=float, default=64.0)
        worker.add_argument("--batch", type=int, default=64)
        worker.add_argument("--steps", type=int, default=10)
        worker.add_argument("--arch", default="resnet50")
        worker.add_argument("--image-size", type=int, default=224)
        worker.add_argument("--dilate", type=float, default=10.0)
        worker.add_argument("--out", default="standin-profiles")
        worker.add_argument("--precisions", default=",".join(STANDIN_PRECISIONS))
        worker.add_argument("--batches", default=",".join(map(str, STANDIN_BATCHES)))
        worker.add_argument("--min-step-s", type=float, default=0.5)
        w = worker.parse_args(argv[1:])
        if argv[0] == "_detect":
            rec = worker_detect()
        elif argv[0] == "_exchange":
            rec = worker_exchange(w.path, w.device, w.mb)
        elif argv[0] == "_offload":
            rec = worker_offload(w.arch, w.batch, w.steps, w.device, w.image_size)
        elif argv[0] == "_standin":
            rec = worker_standin(
                w.arch,
                w.steps,
                w.dilate,
                w.out,
                w.device,
                tuple(w.precisions.split(",")),
                tuple(int(b) for b in w.batches.split(",")),
                w.image_size,
                w.min_step_s,
            )
        else:
            rec = worker_throughput(w.arch, w.batch, w.steps, w.device)
        if rec.get("rank", 0) == 0:
            print(json.dumps(rec), flush=True)
        return 0 if rec["ok"] else 1
    report = run_checks(parser.parse_args(argv))
    print(json.dumps(report, indent=2), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
