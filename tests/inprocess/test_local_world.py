"""Tier 2: exchange and mixing on the in-process thread world (same checks as under MPI)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gossipgrad.comm.base import CommError, CommTimeout
from gossipgrad.comm.local import allreduce_, run_ranks
from gossipgrad.comm.staging import Stager

from multirank import checks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("check", checks.ALL, ids=lambda c: c.__name__)
def test_check_in_process(size, check):
    """Passes, fails, or is skipped exactly where checks.SKIPPED_AT says the check does not
    apply (every rank raises NotApplicable alike; run_ranks re-raises it here)."""
    try:
        run_ranks(size, check, timeout=60, comm_timeout=20)
    except checks.NotApplicable as exc:
        assert checks.skipped_at(check, size), f"{check.__name__} skipped on {size} ranks: {exc}"
        pytest.skip(f"{check.__name__} on {size} ranks: {exc}")
    assert not checks.skipped_at(check, size), (
        f"{check.__name__} ran on {size} ranks, where SKIPPED_AT says it does not apply"
    )


@pytest.mark.timeout(60)
def test_staging_path_gives_the_same_result():
    """Host staging (forced on CPU tensors) is exercised and changes nothing."""
    run_ranks(
        4, checks.check_one_step_closed_form, Stager(cuda_aware=False, force=True), timeout=30
    )


@pytest.mark.timeout(30)
def test_a_failing_rank_wakes_the_others():
    def body(comm):
        if comm.rank == 1:
            raise RuntimeError("boom")
        buf = np.zeros(1)
        comm.irecv(buf, 1, 5).wait(20)

    with pytest.raises(RuntimeError, match="boom"):
        run_ranks(3, body, timeout=10)


@pytest.mark.timeout(30)
def test_a_hang_becomes_an_error_naming_the_stuck_ranks():
    def body(comm):
        if comm.rank == 2:
            comm.irecv(np.zeros(1), 0, 9).wait(60)

    with pytest.raises(TimeoutError, match=r"ranks \[2\]"):
        run_ranks(3, body, timeout=1)


@pytest.mark.timeout(30)
def test_deadline_message_names_rank_peer_step_and_tag():
    from gossipgrad.comm.base import WaitContext

    def body(comm):
        if comm.rank == 0:
            comm.irecv(np.zeros(1), 1, 1003, WaitContext("sent nothing", 1, 1003, 17)).wait(0.2)

    with pytest.raises(
        CommTimeout,
        match=r"rank 0, step 17: peer 1 sent nothing for 0.2 s "
        r"\(tag GRAD_BUCKET_3\)",
    ):
        run_ranks(2, body, timeout=10)


@pytest.mark.timeout(30)
def test_receives_match_in_posting_order_like_mpi():
    """Two receives from one source with one tag take the messages in the order the
    receives were posted, whichever is tested first (MPI's non-overtaking rule)."""

    def body(comm):
        if comm.rank == 0:
            comm.isend(np.array([1.0]), 1, 4)
            comm.isend(np.array([2.0]), 1, 4)
            return None
        first, second = np.zeros(1), np.zeros(1)
        r1, r2 = comm.irecv(first, 0, 4), comm.irecv(second, 0, 4)
        r2.wait(5)
        r1.wait(5)
        return first[0], second[0]

    assert run_ranks(2, body, timeout=10)[1] == (1.0, 2.0)


@pytest.mark.timeout(30)
def test_message_size_mismatch_is_an_error():
    def body(comm):
        if comm.rank == 0:
            comm.isend(np.zeros(4), 1, 1)
        else:
            comm.irecv(np.zeros(2), 0, 1).wait(5)

    with pytest.raises(CommError, match="32 bytes"):
        run_ranks(2, body, timeout=10)


@pytest.mark.timeout(30)
def test_dup_isolates_traffic():
    def body(comm):
        other = comm.dup()
        if comm.rank == 0:
            comm.isend(np.array([1.0]), 1, 7)
            other.isend(np.array([2.0]), 1, 7)
            return None
        a, b = np.zeros(1), np.zeros(1)
        other.irecv(b, 0, 7).wait(5)
        comm.irecv(a, 0, 7).wait(5)
        return (a[0], b[0])

    assert run_ranks(2, body, timeout=10)[1] == (1.0, 2.0)


@pytest.mark.timeout(30)
def test_bcast_and_barrier():
    def body(comm):
        x = torch.full((3,), float(comm.rank))
        comm.bcast_(x, root=2)
        comm.barrier()
        return x.tolist()

    assert run_ranks(4, body, timeout=10) == [[2.0] * 3] * 4


@pytest.mark.timeout(30)
def test_split_gives_each_color_its_own_ranks_and_traffic():
    """As MPI_Comm_split: ranks 0, 2, 4 and 1, 3 form two groups numbered in rank order;
    None joins none; collectives and messages stay within a group."""

    def body(comm):
        sub = comm.split(None if comm.rank == 5 else comm.rank % 2)
        if sub is None:
            return None
        total = float(allreduce_(sub, np.array([float(comm.rank)]))[0])
        if sub.rank == 0:
            sub.isend(np.array([10.0 + comm.rank]), 1, 3)
        got = np.zeros(1)
        if sub.rank == 1:
            sub.irecv(got, 0, 3).wait(5)
        sub.free()
        return (sub.rank, sub.size, total, got[0])

    assert run_ranks(6, body, timeout=10) == [
        (0, 3, 6.0, 0.0),
        (0, 2, 4.0, 0.0),
        (1, 3, 6.0, 10.0),
        (1, 2, 4.0, 11.0),
        (2, 3, 6.0, 0.0),
        None,
    ]


def test_receives_match_messages_in_the_order_they_were_posted():
    """As in MPI: two receives from one source with one tag get the messages in posting
    order, even when the second is tested first (ps keeps several steps' pushes posted)."""

    def body(comm):
        if comm.rank == 1:
            first, second = np.zeros(1), np.zeros(1)
            r1, r2 = comm.irecv(first, 0, 7), comm.irecv(second, 0, 7)
            comm.barrier()
            comm.barrier()
            r2.wait(10)
            r1.wait(10)
            return first[0], second[0]
        comm.barrier()
        comm.isend(np.array([1.0]), 1, 7)
        comm.isend(np.array([2.0]), 1, 7)
        comm.barrier()
        return None

    assert run_ranks(2, body, timeout=20)[1] == (1.0, 2.0)
