"""Network namespaces for scripts/emucluster.py: N ranks on one bridge, every link shaped.

Stdlib only, root only. Every name this module creates starts with `gg<pid>-`; nothing in the
root namespace is touched and no namespace has a route beyond 10.213.0.0/16. See
emucluster.py for the topology and how MPI jobs are placed into it.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess

NS_PATTERN = re.compile(r"^gg(\d+)-(br|\d+)$")
SUBNET = "10.213"
RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9}
CAUGHT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class EmuError(RuntimeError):
    """A setup step failed; the message says which and what to do."""


def parse_rate(text: str) -> int:
    """Return bits per second for a tc-style rate such as '1gbit', '200mbit' or '1.5gbit'."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit)", text.strip().lower())
    if not m:
        raise ValueError(f"--rate {text!r}: expected a number and bit|kbit|mbit|gbit, e.g. 1gbit")
    bits = int(float(m.group(1)) * RATE_UNITS[m.group(2)])
    if bits < 10**5:
        raise ValueError(f"--rate {text!r}: below 100kbit the shaping is not meaningful")
    return bits


def rank_address(i: int) -> str:
    """Address of rank `i` (0-based) in 10.213.0.0/16, e.g. rank 0 -> 10.213.0.1."""
    host = i + 1
    return f"{SUBNET}.{host >> 8}.{host & 255}"


def require_root_and_tools() -> None:
    if os.geteuid() != 0:
        raise SystemExit("emucluster: must run as root (it creates network namespaces); try sudo")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise SystemExit(
            f"emucluster: {', '.join(missing)} not found; install iproute2 "
            "(apt-get install iproute2)"
        )


def sh(*args: str) -> str:
    """Run one command; raise EmuError with its stderr if it fails."""
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise EmuError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def list_namespaces() -> list[str]:
    out = sh("ip", "netns", "list")
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def kill_namespace_processes(ns: str) -> None:
    """SIGKILL what still runs inside `ns` (ranks of this tool's own job), so it can go."""
    proc = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    for pid in proc.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def delete_namespace(ns: str) -> None:
    kill_namespace_processes(ns)
    subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


class Cluster:
    """N rank namespaces on one shaped bridge; `with Cluster(...)` creates and removes them.

    `destroy` is idempotent and safe to call from a signal handler or atexit.
    """

    def __init__(self, size: int, rate_bits: int, prefix: str | None = None) -> None:
        if not 1 <= size <= 4000:
            raise ValueError(f"-n {size}: expected 1..4000 ranks")
        self.size = size
        self.rate_bits = rate_bits
        self.prefix = prefix or f"gg{os.getpid()}"
        self.bridge_ns = f"{self.prefix}-br"
        self.created: list[str] = []

    def rank_ns(self, i: int) -> str:
        return f"{self.prefix}-{i}"

    def __enter__(self) -> Cluster:
        atexit.register(self.destroy)
        try:
            self.create()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _add_ns(self, ns: str) -> None:
        sh("ip", "netns", "add", ns)
        self.created.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")

    def _shape(self, ns: str, dev: str) -> None:
        rate_bytes = self.rate_bits // 8
        burst = max(32 * 1024, rate_bytes // 250)  # >= 4 ms at the rate; >= 32 KiB
        sh(
            "tc",
            "-n",
            ns,
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            f"{self.rate_bits}bit",
            "burst",
            str(burst),
            "latency",
            "25ms",
        )

    def create(self) -> None:
        br = self.bridge_ns
        self._add_ns(br)
        sh("ip", "-n", br, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", br, "link", "set", "br0", "up")
        for i in range(self.size):
            ns, port = self.rank_ns(i), f"p{i}"
            self._add_ns(ns)
            sh(
                "ip",
                "-n",
                br,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            sh("ip", "-n", br, "link", "set", port, "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{rank_address(i)}/16", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            self._shape(ns, "eth0")
            self._shape(br, port)

    def destroy(self) -> None:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, CAUGHT_SIGNALS)  # finish the cleanup
        try:
            while self.created:
                delete_namespace(self.created.pop())
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def run_alive(pid: int) -> bool:
    """True if `pid` is a live (not zombie) emucluster process, i.e. its namespaces are in use."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X") and b"emucluster" in cmdline


def cleanup(everything: bool) -> list[str]:
    """Delete gg<pid>-* namespaces whose <pid> is gone (all of them with `everything`)."""
    require_root_and_tools()
    removed = []
    for ns in list_namespaces():
        m = NS_PATTERN.match(ns)
        if not m:
            continue
        pid = int(m.group(1))
        if not everything and pid != os.getpid() and run_alive(pid):
            continue
        delete_namespace(ns)
        removed.append(ns)
    return removed
