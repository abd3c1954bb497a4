#!/usr/bin/env python3
"""Emulated cluster: an MPI job with every rank in its own network namespace, behind a shaped link.

    python scripts/emucluster.py run -n 8 --rate 1gbit [--delay-ms 5] [--ranks-per-node 4] -- CMD
    python scripts/emucluster.py check [--rates 1gbit,100mbit] [--size-mb 64]   # prints JSON
    python scripts/emucluster.py cleanup [--all]

Needs root and iproute2 (`ip`, `tc`). Stdlib only; the command runs under the MPICH `mpiexec`
next to this Python (override with --mpiexec).

Topology of `run -n N`, all of it in namespaces this tool creates (nothing in the root
namespace is touched, and no namespace has a route anywhere but 10.213.0.0/16):

    gg<pid>-br      bridge `br0` with ports p0..p{N-1}
    gg<pid>-<i>     `eth0` (veth peer of p<i>) with 10.213.<(i+1)//256>.<(i+1)%256>/16, and `lo`

Both ends of every veth get `tc ... tbf rate <rate>`, so each rank has its own shaped up- and
downlink, like a port on a switch. With `--ranks-per-node R`, ranks R at a time share a
namespace (`gg<pid>-<rank // R>`): a node whose ranks share its one shaped link to the others
and talk to each other over the namespace's own loopback, unshaped.

The kernel may lack netem, so latency is not emulated here: --delay-ms is only exported to
the ranks as GOSSIPGRAD_INJECT_DELAY_MS for the runtime to inject.

Each rank is started by hydra as `python emucluster.py _rank <prefix> -- CMD`, which execs
`ip netns exec <prefix>-<PMI_RANK> CMD`. The PMI connection is an inherited fd (PMI_FD), so it
survives the switch. MPICH is forced off shared memory and onto TCP over eth0 (set by
`run` unless already in the environment):

    MPIR_CVAR_NOLOCAL=1          treat every peer as remote (else /dev/shm is used: one host)
    MPIR_CVAR_CH4_NETMOD=ucx     the pip mpich wheel has ucx and ofi; pin the one configured
    UCX_TLS=tcp,self             no UCX shared-memory/cma transports
    UCX_NET_DEVICES=eth0         not `lo`, whose 127.0.0.1 is a different host in each rank
    UCX_RNDV_SCHEME=get_zcopy    the receiver pulls large messages; UCX's default rendezvous
                                 over TCP can fall to half duplex on a loaded host
                                 (`lab/studies/mpi_probe.py duplex` measures both schemes;
                                 lab/records/benchmarks.md has the record)

Every namespace is removed on exit, error, SIGINT/SIGTERM/SIGHUP (try/finally, signal
handlers and atexit); `cleanup` removes those left by runs whose process is gone (a SIGKILL).
The exit code of `run` is the command's (128+signal when interrupted).
"""

# Over 300 lines on purpose: the three commands, the rank's exec and their parser share the
# launch (the namespaces themselves are scripts/emunet.py).

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from emunet import (
    CAUGHT_SIGNALS,
    Cluster,
    EmuError,
    cleanup,
    list_namespaces,
    parse_rate,
    require_root_and_tools,
)

MPI_ENV = {
    "MPIR_CVAR_NOLOCAL": "1",
    "MPIR_CVAR_CH4_NETMOD": "ucx",
    "UCX_TLS": "tcp,self",
    "UCX_NET_DEVICES": "eth0",
    "UCX_RNDV_SCHEME": "get_zcopy",
}


class Interrupted(BaseException):
    """Raised from a signal handler so that `finally` blocks run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def default_mpiexec() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.access(beside, os.X_OK) else (shutil.which("mpiexec") or "mpiexec")


def job_env(rate: str, delay_ms: float) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in MPI_ENV.items():
        env.setdefault(key, value)
    env["GOSSIPGRAD_INJECT_DELAY_MS"] = f"{delay_ms:g}"
    env["GOSSIPGRAD_EMU_RATE"] = rate
    return env


def raise_on_signals() -> None:
    """Turn SIGINT/SIGTERM/SIGHUP into Interrupted, so every `finally` and __exit__ runs."""

    def on_signal(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    for sig in CAUGHT_SIGNALS:
        signal.signal(sig, on_signal)


def run_mpiexec(argv: list[str], env: dict[str, str], stdout: int | None = None) -> int:
    """Run mpiexec in its own session and return its exit code.

    On Interrupted the job's process group gets the same signal, SIGKILL 5 s later, and the
    exception propagates so the caller's cleanup runs.
    """
    proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=stdout)
    try:
        return proc.wait()
    except Interrupted as stop:
        for sig in (stop.signum, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=5.0)
                break
            except subprocess.TimeoutExpired:
                continue
            except ProcessLookupError:
                break
        raise


def run_in_cluster(
    size: int,
    rate: str,
    delay_ms: float,
    cmd: Sequence[str],
    mpiexec: str,
    capture: bool = False,
    ranks_per_node: int = 1,
) -> tuple[int, str]:
    """Create the cluster, run `mpiexec -n size` with each rank in its namespace (ranks
    `ranks_per_node` at a time sharing one: a node, its one shaped link, and a loopback
    between its ranks), remove it."""
    require_root_and_tools()
    if not cmd:
        raise SystemExit("emucluster run: no command given; usage: run -n N --rate R -- CMD ...")
    if ranks_per_node < 1 or size % ranks_per_node:
        raise ValueError(f"--ranks-per-node {ranks_per_node} does not divide -n {size}")
    with Cluster(size // ranks_per_node, parse_rate(rate)) as cluster:
        argv = [
            mpiexec,
            "-n",
            str(size),
            sys.executable,
            os.path.abspath(__file__),
            "_rank",
            cluster.prefix,
            str(ranks_per_node),
            "--",
            *cmd,
        ]
        env = job_env(rate, delay_ms)
        if not capture:
            return run_mpiexec(argv, env), ""
        with tempfile.TemporaryFile() as out:
            code = run_mpiexec(argv, env, stdout=out.fileno())
            out.seek(0)
            return code, out.read().decode(errors="replace")


def exec_rank(prefix: str, cmd: list[str], ranks_per_node: int = 1) -> None:
    """Inside hydra: replace this process with `ip netns exec <prefix>-<node> CMD`, the
    node being `rank // ranks_per_node`."""
    rank = os.environ.get("PMI_RANK") or os.environ.get("MPI_LOCALRANKID")
    if rank is None:
        raise SystemExit("emucluster _rank: neither PMI_RANK nor MPI_LOCALRANKID is set")
    ns = f"{prefix}-{int(rank) // ranks_per_node}"
    os.environ["GOSSIPGRAD_EMU_NETNS"] = ns
    os.execvp("ip", ["ip", "netns", "exec", ns, *cmd])


PINGPONG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pingpong.py")


def last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise EmuError(f"ping-pong printed no JSON; its output was:\n{text}")


def run_plain(size: int, cmd: Sequence[str], mpiexec: str, extra_env: dict[str, str]) -> str:
    """`mpiexec -n size CMD` on the host (no namespaces); return stdout, raise on failure."""
    env = {k: v for k, v in os.environ.items() if k not in MPI_ENV} | extra_env
    with tempfile.TemporaryFile() as out:
        code = run_mpiexec([mpiexec, "-n", str(size), *cmd], env, stdout=out.fileno())
        out.seek(0)
        text = out.read().decode(errors="replace")
    if code != 0:
        raise EmuError(f"plain mpiexec ping-pong exited with {code}:\n{text}")
    return text


def check(rates: list[str], size_mb: int, iters: int, mpiexec: str) -> dict:
    """Measure 2-rank ping-pong bandwidth through the shaped namespaces and, for contrast,
    on the plain host (shared memory, and TCP looped back by the kernel)."""
    pingpong = [sys.executable, PINGPONG, "--size-mb", str(size_mb), "--iters", str(iters)]
    runs = []
    for rate in rates:
        code, out = run_in_cluster(2, rate, 0.0, pingpong, mpiexec, capture=True)
        if code != 0:
            raise EmuError(f"ping-pong at --rate {rate} exited with {code}:\n{out}")
        rec = last_json(out)
        rate_mbit = parse_rate(rate) / 1e6
        runs.append(
            {
                "mode": "netns",
                "rate": rate,
                "rate_mbit_per_s": rate_mbit,
                "ratio": round(rec["mbit_per_s"] / rate_mbit, 3),
                **rec,
            }
        )
    # UCX's tcp transport will not use `lo` between processes ("no route"); over the host's own
    # address the kernel still loops the traffic back internally, which is what we want here.
    host_tcp = {k: v for k, v in MPI_ENV.items() if k != "UCX_NET_DEVICES"}
    baselines = {"host-shm": {}, "host-tcp": host_tcp}
    for mode, env in baselines.items():
        runs.append({"mode": mode, **last_json(run_plain(2, pingpong, mpiexec, env))})
    prefix = f"gg{os.getpid()}-"
    leftover = [ns for ns in list_namespaces() if ns.startswith(prefix)]
    return {"size_mb": size_mb, "iters": iters, "runs": runs, "leftover_namespaces": leftover}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="emucluster.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run `-- CMD ...` under mpiexec, one namespace per rank")
    run.add_argument("-n", type=int, required=True, help="number of ranks (namespaces)")
    run.add_argument(
        "--rate", default="1gbit", help="per-rank link rate, tc syntax (default 1gbit)"
    )
    run.add_argument(
        "--delay-ms",
        type=float,
        default=0.0,
        help="exported as GOSSIPGRAD_INJECT_DELAY_MS (default 0)",
    )
    run.add_argument(
        "--ranks-per-node",
        type=int,
        default=1,
        help="ranks sharing a namespace: one node, one shaped link (default 1)",
    )
    run.add_argument("--mpiexec", default=default_mpiexec(), help="default: %(default)s")
    chk = sub.add_parser("check", help="measure shaped vs plain ping-pong bandwidth, print JSON")
    chk.add_argument(
        "--rates", default="1gbit,100mbit", help="comma-separated (default %(default)s)"
    )
    chk.add_argument("--size-mb", type=int, default=64, help="message size (default 64)")
    chk.add_argument("--iters", type=int, default=2, help="timed round trips (default 2)")
    chk.add_argument("--mpiexec", default=default_mpiexec(), help="default: %(default)s")
    cln = sub.add_parser("cleanup", help="delete gg<pid>-* namespaces of runs that are gone")
    cln.add_argument("--all", action="store_true", help="also those of runs still alive")
    rank = sub.add_parser("_rank", help=argparse.SUPPRESS)
    rank.add_argument("prefix")
    rank.add_argument("ranks_per_node", type=int, nargs="?", default=1)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, cmd = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    if args.command == "_rank":
        exec_rank(args.prefix, cmd, args.ranks_per_node)
    raise_on_signals()
    try:
        if args.command == "run":
            per_node = args.ranks_per_node
            code, _ = run_in_cluster(
                args.n, args.rate, args.delay_ms, cmd, args.mpiexec, ranks_per_node=per_node
            )
            return code
        if args.command == "check":
            rates = [r.strip() for r in args.rates.split(",") if r.strip()]
            report = check(rates, args.size_mb, args.iters, args.mpiexec)
            print(json.dumps(report, indent=2))
            return 1 if report["leftover_namespaces"] else 0
        print(json.dumps({"removed": cleanup(args.all)}))
        return 0
    except Interrupted as stop:
        print(
            f"emucluster: interrupted by signal {stop.signum}; namespaces removed", file=sys.stderr
        )
        return 128 + stop.signum
    except (EmuError, ValueError) as err:
        print(f"emucluster: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
