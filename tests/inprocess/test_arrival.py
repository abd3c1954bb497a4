"""Collective deadlines name the ranks that did not arrive (comm.collectives), in-process: one
rank of four never joins the stop agreement, the evaluation or the consensus average."""

from __future__ import annotations

import threading

import pytest
import torch

from gossipgrad.comm.base import CommTimeout
from gossipgrad.comm.collectives import _code, missing_message
from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.consensus import average_parameters_
from gossipgrad.engine.run.evaluation import evaluate
from gossipgrad.engine.run.signals import PeriodicAgreement, StopSignals

ABSENT = 2


def _absent_rank_waits(release: threading.Event) -> None:
    release.wait(30)  # never joins; let go once the test is over


def _run_without_rank_2(body) -> str:
    """Run ``body(comm)`` on ranks 0, 1, 3 of a 4-rank world (1 s deadline); return the
    message of the CommTimeout it raised."""
    release = threading.Event()

    def rank(comm):
        if comm.rank == ABSENT:
            _absent_rank_waits(release)
            return None
        try:
            body(comm)
        finally:
            release.set()

    with pytest.raises(CommTimeout) as info:
        run_ranks(4, rank, timeout=30, comm_timeout=1.0)
    return str(info.value)


def _assert_names_rank_2(message: str, what: str) -> None:
    assert f"{what} did not complete for" in message, message
    assert "rank 2 did not arrive" in message, message
    assert "is rank 2 alive?" in message, message
    assert "raise gossipgrad.init(timeout=SECONDS)" in message, message  # the library's
    heard = message.split("heard from ranks ")[1].split(" within")[0]
    assert heard == "0, 1, 3", message


@pytest.mark.timeout(60)
def test_stop_agreement_names_the_absent_rank():
    def body(comm):
        stop = StopSignals(comm, signals=())
        stop.agreed(step=7)

    message = _run_without_rank_2(body)
    _assert_names_rank_2(message, "stop agreement")
    assert ", step 7:" in message


@pytest.mark.timeout(60)
def test_periodic_stop_agreement_names_the_absent_rank():
    def body(comm):
        agreement = PeriodicAgreement(StopSignals(comm, signals=()), period=4)
        for step in range(1, 9):  # posted at 4, completed (and timed out) at 8
            agreement.agreed(step)

    message = _run_without_rank_2(body)
    _assert_names_rank_2(message, "stop agreement")
    assert ", step 4:" in message


@pytest.mark.timeout(60)
def test_evaluation_names_the_absent_rank():
    class Source:
        def eval_batches(self):
            yield torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)

    message = _run_without_rank_2(lambda comm: evaluate(torch.nn.Linear(3, 2), Source(), comm))
    _assert_names_rank_2(message, "evaluation")


@pytest.mark.timeout(60)
def test_consensus_average_names_the_absent_rank():
    message = _run_without_rank_2(lambda comm: average_parameters_(torch.nn.Linear(3, 2), comm))
    _assert_names_rank_2(message, "consensus average")


def test_message_names_several_missing_ranks_and_ranks_elsewhere():
    here = (40, _code("stop agreement"))
    message = missing_message(
        0,
        "stop agreement",
        40,
        120.0,
        [2, 5],
        {1: here, 3: here, 4: (38, _code("evaluation"))},
        12.0,
    )
    assert message.startswith(
        "rank 0, step 40: stop agreement did not complete for 120 s; "
        "ranks 2, 5 did not arrive (heard from ranks 0, 1, 3 within "
        "12 s); in another collective: rank 4 (step 38); are ranks 2, 5 "
        "alive?"
    ), message


def test_message_when_every_rank_answered(cli_names):
    message = missing_message(1, "evaluation", None, 5.0, [], {0: (-1, _code("evaluation"))}, 2.0)
    assert message == (
        "rank 1: evaluation did not complete for 5 s; every rank answered the "
        "probe; is every rank at the same step? raise --comm-timeout if the "
        "network is slow"
    )


def test_a_peer_timeout_names_the_library_argument_and_join_for_library_callers():
    from gossipgrad.comm.base import WaitContext

    message = WaitContext("sent nothing", 1, 1000, 7).describe(0, 120.0)
    assert message == (
        "rank 0, step 7: peer 1 sent nothing for 120 s (tag GRAD_BUCKET_0); is rank 1 "
        "alive, or out of data (call opt.join() after the training loop)? raise "
        "gossipgrad.init(timeout=SECONDS) if the network is slow"
    )


def test_a_peer_timeout_names_the_flag_under_the_command_line(cli_names):
    from gossipgrad.comm.base import WaitContext

    message = WaitContext("sent nothing", 1, 1000, 7).describe(0, 120.0)
    assert message.endswith("is rank 1 alive? raise --comm-timeout if the network is slow")
