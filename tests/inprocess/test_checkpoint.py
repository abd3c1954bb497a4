"""Checkpoint files and the stop-signal agreement, in one process (thread ranks for 2)."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.engine.run import checkpoint as ckpt
from gossipgrad.engine.run import snapshot as snap
from gossipgrad.engine.run.signals import StopSignals
from gossipgrad.strategies import DistributedOptimizer, build_optimizer

torch.set_num_threads(1)


class Counter:
    """A per-rank stateful object, as the background shuffle will be."""

    def __init__(self, value: int) -> None:
        self.value = value

    def state_dict(self) -> dict[str, Any]:
        return {"value": torch.tensor([self.value])}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = int(state["value"][0])


def trained(comm: Any, seed: int) -> tuple[torch.nn.Module, DistributedOptimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = build_optimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model, comm, overlap=False
    )
    g = torch.Generator().manual_seed(seed + comm.rank)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4, generator=g)).square().mean().backward()
        opt.step()
    return model, opt


def test_write_find_and_prune_keep_the_newest_complete(tmp_path: Path) -> None:
    comm = LocalWorld(1).communicators()[0]
    saver = ckpt.Checkpointer(str(tmp_path), comm, keep=2)
    (tmp_path / "ckpt-000000009.pt.tmp").write_bytes(b"half written")
    for step in (3, 5, 7):
        saver.save(step, {"format": ckpt.FORMAT, "version": ckpt.VERSION, "step": step})
    assert sorted(os.listdir(tmp_path)) == [
        "ckpt-000000005.pt",
        "ckpt-000000007.pt",
        "ckpt-000000009.pt.tmp",
    ]
    assert ckpt.find_latest(str(tmp_path)) == str(tmp_path / "ckpt-000000007.pt")
    assert ckpt.read(str(tmp_path / "ckpt-000000007.pt"))["step"] == 7
    assert ckpt.locate("auto", str(tmp_path / "empty")) is None


def test_unreadable_and_foreign_files_are_refused_by_name(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=f"cannot read checkpoint {junk}"):
        ckpt.read(str(junk))
    foreign = tmp_path / "weights.pt"
    torch.save({"fc.weight": torch.zeros(2)}, foreign)
    with pytest.raises(ValueError, match=f"{foreign} is not a gossipgrad checkpoint"):
        ckpt.read(str(foreign))
    with pytest.raises(ValueError, match="--resume nope.pt: no such checkpoint file"):
        ckpt.locate("nope.pt", None)


def test_mismatch_names_every_differing_setting() -> None:
    state = {"compat": {"arch": "resnet50", "size": 4, "seed": 0}}
    with pytest.raises(
        ValueError,
        match=r"arch is 'resnet50' in the checkpoint but "
        r"'googlenet' in this run; size is 4 .* but 2",
    ):
        ckpt.check_compatible(state, {"arch": "googlenet", "size": 2, "seed": 0}, "c.pt")


def test_save_and_restore_round_trip_on_two_ranks(tmp_path: Path) -> None:
    def body(comm: Any) -> tuple[list[torch.Tensor], int, list[torch.Tensor]]:
        model, opt = trained(comm, seed=1)
        snap.consensus_(opt, comm)
        saved = [t.clone() for t in model.state_dict().values()]
        momentum = [s["momentum_buffer"].clone() for s in opt.optimizer.state.values()]
        state = snap.snapshot(model, opt, 3, 10, {"compat": {}}) if comm.rank == 0 else {}
        path = ckpt.Checkpointer(str(tmp_path), comm).save(
            3, state, {"shuffle": Counter(10 + comm.rank)}
        )
        fresh, opt2 = trained(comm, seed=2)
        counter = Counter(-1)
        step = snap.restore_(
            path, ckpt.read(path), fresh, opt2, comm, rank_states={"shuffle": counter}
        )
        for a, b in zip(saved, fresh.state_dict().values(), strict=True):
            assert torch.equal(a, b)
        for a, s in zip(momentum, opt2.optimizer.state.values(), strict=True):
            assert torch.equal(a, s["momentum_buffer"])
        opt.close()
        opt2.close()
        return saved, step + 100 * counter.value, momentum

    results = run_ranks(2, body, timeout=60)
    assert [r[1] for r in results] == [1003, 1103]  # step 3; each rank got its own state
    for a, b in zip(results[0][0] + results[0][2], results[1][0] + results[1][2], strict=True):
        assert torch.equal(a, b)  # consensus: one model, one momentum
    state = torch.load(tmp_path / "ckpt-000000003.pt", weights_only=True)
    assert state["rank_states"] == ["shuffle"] and state["schedule"]["cycle"] == 3
    assert (tmp_path / "ckpt-000000003.rank1.pt").exists()


def test_a_failed_write_on_one_rank_fails_all_and_keeps_the_previous(tmp_path: Path) -> None:
    (tmp_path / "ckpt-000000008.rank1.pt").mkdir()  # rank 1 cannot rename onto a directory

    def body(comm: Any) -> str:
        saver = ckpt.Checkpointer(str(tmp_path), comm)
        head = {"format": ckpt.FORMAT, "version": ckpt.VERSION}
        saver.save(4, {**head, "step": 4}, {"s": Counter(0)})
        with pytest.raises(OSError) as err:
            saver.save(8, {**head, "step": 8}, {"s": Counter(0)})
        return str(err.value)

    errors = run_ranks(2, body, timeout=60)
    assert errors[0] == errors[1]  # one message, every rank
    assert "rank 1 of 2: could not write its part of checkpoint" in errors[0]
    assert "Is a directory; earlier checkpoints in" in errors[0]
    assert not list(tmp_path.glob("*.tmp"))
    assert ckpt.find_latest(str(tmp_path)) == str(tmp_path / "ckpt-000000004.pt")


def test_a_first_checkpoint_that_fails_leaves_no_part_and_claims_no_earlier(
    tmp_path: Path,
) -> None:
    """The disk fills up while rank 0 writes the first main file, after every rank wrote
    its part: the parts go too (a part without its main file is no checkpoint), and the
    message says that none was kept, not that earlier checkpoints were."""

    def full(tmp: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", tmp)

    def body(comm: Any) -> str:
        saver = ckpt.Checkpointer(str(tmp_path), comm)
        if comm.rank == 0:
            saver.before_rename = full  # rank 0's hook runs on the main file only
        head = {"format": ckpt.FORMAT, "version": ckpt.VERSION}
        with pytest.raises(OSError) as err:
            saver.save(4, {**head, "step": 4}, {"s": Counter(comm.rank)})
        return str(err.value)

    errors = run_ranks(2, body, timeout=60)
    assert errors[0] == errors[1]  # one message, every rank
    assert "could not write checkpoint" in errors[0] and "No space left on device" in errors[0]
    assert "(this was its first)" in errors[0] and "earlier" not in errors[0], errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_stop_is_agreed_when_only_one_rank_was_signalled() -> None:
    def body(comm: Any) -> list[int]:
        stop = StopSignals(comm, signals=())
        seen = [stop.agreed()]
        if comm.rank == 1:
            stop._handle(signal.SIGUSR1, None)
            stop._handle(signal.SIGTERM, None)  # a second signal changes nothing
        seen += [stop.agreed(), stop.agreed()]
        return seen

    assert run_ranks(2, body, timeout=30) == [[0, 10, 10], [0, 10, 10]]


def test_real_sigterm_twice_only_sets_the_flag() -> None:
    """And once stopping, further ones are ignored to the end (a SIGTERM forwarded again
    during tear-down used to end the job with status 15 where the stop promises 0); without
    a signal the previous handlers come back."""
    stop = StopSignals(LocalWorld(1).communicators()[0])
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.agreed() == signal.SIGTERM
    finally:
        stop.close()
    try:
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # ignored: this test process goes on
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    StopSignals(LocalWorld(1).communicators()[0]).close()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_rng_state_survives_weights_only_loading(tmp_path: Path) -> None:
    np.random.seed(3)
    torch.save(snap.rng_state(), tmp_path / "rng.pt")
    want = (np.random.rand(), torch.rand(1))
    snap.set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (np.random.rand(), torch.rand(1)) == want
