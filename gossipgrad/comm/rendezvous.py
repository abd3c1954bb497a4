"""Rendezvous for libraries that bring their own transport (torch.distributed for ``ddp``).

Rank 0 chooses an address, and every rank learns it through the communicator as a
fixed-size ``uint8`` buffer (a broadcast of raw bytes, never a pickle)::

    >>> from gossipgrad.comm.local import run_ranks
    >>> def body(comm):
    ...     return share_address(comm, ("127.0.0.1", 29500) if comm.rank == 0 else None)
    >>> run_ranks(3, body)
    [('127.0.0.1', 29500), ('127.0.0.1', 29500), ('127.0.0.1', 29500)]

Which address: when every rank runs on one host (same host name and same network
namespace, see :func:`same_host`), loopback ``127.0.0.1``; otherwise the IPv4 address of
``GLOO_SOCKET_IFNAME`` when it is set, else of the first non-loopback interface that has
one (in the emulated cluster, ``eth0`` in each rank's namespace). Linux only (``ioctl``).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct

import numpy as np

from gossipgrad.comm.base import Communicator, ReduceOp
from gossipgrad.comm.collectives import allreduce_
from gossipgrad.comm.hosts import host_id

ADDRESS_BYTES = 256
LOOPBACK = "127.0.0.1"
_SIOCGIFADDR = 0x8915


def encode_address(host: str, port: int) -> np.ndarray:
    """``host:port`` as UTF-8 in a zero-padded ``uint8[ADDRESS_BYTES]``."""
    if not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port}")
    raw = f"{host}:{port}".encode()
    if not host or len(raw) >= ADDRESS_BYTES or b"\0" in raw:
        raise ValueError(f"address {host!r}:{port} does not fit {ADDRESS_BYTES} bytes")
    buf = np.zeros(ADDRESS_BYTES, dtype=np.uint8)
    buf[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return buf


def decode_address(buf: np.ndarray) -> tuple[str, int]:
    """Inverse of :func:`encode_address`; ValueError for anything else."""
    raw = bytes(buf).split(b"\0", 1)[0].decode()
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not a host:port address: {raw!r}")
    return host, int(port)


def share_address(
    comm: Communicator, address: tuple[str, int] | None, root: int = 0
) -> tuple[str, int]:
    """Broadcast ``root``'s ``(host, port)``; other ranks pass None. Collective."""
    buf = encode_address(*address) if comm.rank == root else np.zeros(ADDRESS_BYTES, dtype=np.uint8)
    if comm.rank == root and address is None:
        raise ValueError(f"rank {root} must pass the address it shares")
    comm.bcast_(buf, root)
    return decode_address(buf)


def same_host(comm: Communicator) -> bool:
    """True when every rank has the same host name and network namespace (``host_id`` with
    ``netns``: ranks in different namespaces of one machine, as in the emulated cluster, do
    not share loopback). Collective."""
    mine = host_id(netns=True)
    lo = allreduce_(comm, np.array([mine], dtype=np.int64), ReduceOp.MIN)[0]
    hi = allreduce_(comm, np.array([mine], dtype=np.int64), ReduceOp.MAX)[0]
    return bool(lo == hi == mine)


def ipv4_of(ifname: str) -> str | None:
    """The IPv4 address of interface ``ifname``, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(
                s.fileno(), _SIOCGIFADDR, struct.pack("256s", ifname.encode()[:15])
            )
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def choose_interface(one_host: bool) -> tuple[str, str]:
    """``(interface name, IPv4 address)`` this rank should use (see the module docstring)."""
    named = [(name, ipv4_of(name)) for _, name in socket.if_nameindex()]
    with_ip = [(n, ip) for n, ip in named if ip is not None]
    if one_host:
        for n, ip in with_ip:
            if ip == LOOPBACK:
                return n, ip
        raise OSError("no loopback interface with 127.0.0.1 on this host")
    chosen = os.environ.get("GLOO_SOCKET_IFNAME")
    if chosen:
        ip = ipv4_of(chosen)
        if ip is None:
            raise OSError(
                f"GLOO_SOCKET_IFNAME={chosen} has no IPv4 address on "
                f"{socket.gethostname()}; interfaces: {', '.join(n for n, _ in named)}"
            )
        return chosen, ip
    for n, ip in with_ip:
        if not ip.startswith("127."):
            return n, ip
    raise OSError(
        f"ranks run on several hosts but {socket.gethostname()} has no "
        "non-loopback IPv4 interface; set GLOO_SOCKET_IFNAME"
    )
