"""Which host a rank runs on, as one number that ranks exchange as a raw ``int64``.

The one place a host is hashed: :func:`gossipgrad.comm.mpi.node_size` (ranks sharing a
host's cores), :func:`gossipgrad.comm.rendezvous.same_host` (ranks sharing a loopback) and
:func:`gossipgrad.tools.measure.netfit.host_ids` (which ranks a ping-pong crosses the network
between) all compare :func:`host_id` values.
"""

from __future__ import annotations

import hashlib
import os
import socket


def host_id(name: str | None = None, *, netns: bool = False) -> int:
    """A 63-bit hash (``0 <= id < 2**63``, so it fits an ``int64``) of this host's name.

    Args:
        name: the host name to hash; None = ``socket.gethostname()`` (callers on MPI pass
            ``MPI_Get_processor_name``).
        netns: also hash this process's network namespace: ranks in different namespaces
            of one machine (the emulated cluster) share its cores but not its loopback.

    >>> host_id("node1") == host_id("node1") != host_id("node2")
    True
    >>> 0 <= host_id() < 2**63 and host_id("node1") != host_id("node1", netns=True)
    True
    """
    text = socket.gethostname() if name is None else name
    if netns:
        text = f"{text}|{_netns_inode()}"
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _netns_inode() -> int:
    """The inode of this process's network namespace (0 where /proc does not tell)."""
    try:
        return os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return 0
