"""host_id: the one hash of a host that node_size, same_host and netfit compare."""

from __future__ import annotations

import doctest

from gossipgrad.comm import hosts
from gossipgrad.comm.local import run_ranks
from gossipgrad.comm.rendezvous import same_host
from gossipgrad.tools.measure.netfit import host_ids


def test_docstring_examples():
    result = doctest.testmod(hosts)
    assert result.attempted > 0 and result.failed == 0


def test_threads_of_one_process_are_on_one_host():
    ids = run_ranks(3, lambda c: (host_ids(c).tolist(), same_host(c)))
    assert ids == [([hosts.host_id()] * 3, True)] * 3


def test_the_name_is_what_is_hashed(monkeypatch):
    monkeypatch.setattr(hosts.socket, "gethostname", lambda: "node7")
    assert hosts.host_id() == hosts.host_id("node7") != hosts.host_id("node8")
