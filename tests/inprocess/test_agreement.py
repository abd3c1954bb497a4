"""Ranks agree before they spend (docs/guarantees.md, 3), in one process on thread ranks: one
collective compares every setting and what each rank found in its data, and a difference or
a rank's problem is one message, the same on every rank, naming it and the ranks on each
side, before any model is built."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from imagefolder import make_image_folder

from gossipgrad.comm.local import run_ranks
from gossipgrad.engine.agreement import AgreedError, check_settings, check_start, encode
from gossipgrad.engine.run import preflight
from gossipgrad.engine.run.config import RANK_LOCAL, TrainConfig


def errors_on_every_rank(size: int, fn) -> list[str]:
    """Run ``fn(comm)`` on ``size`` thread ranks; every rank must raise AgreedError; their
    messages (which must be identical)."""

    def body(comm):
        try:
            fn(comm)
        except AgreedError as exc:
            return str(exc), exc.reporter
        return None

    out = run_ranks(size, body, timeout=60)
    assert all(o is not None for o in out), f"some ranks went on: {out}"
    assert len({o for o in out}) == 1, out  # one message, one reporter, on every rank
    assert out[0][1] == 0
    return [o[0] for o in out]


def test_a_differing_option_is_named_with_every_side():
    def fn(comm):
        lr = 0.2 if comm.rank == 2 else 0.1
        check_settings(comm, [("--arch", "mlp"), ("--lr", lr), ("--mix", "param")])

    [message, *_] = errors_on_every_rank(4, fn)
    assert message.startswith("--lr differs between ranks: 0.1 on ranks 0, 1, 3; 0.2 on rank 2")


def test_every_other_difference_is_listed_too():
    def fn(comm):
        odd = comm.rank % 2
        check_settings(comm, [("--hidden", 64 * odd), ("--mix", "grad" if odd else "param")])

    [message, *_] = errors_on_every_rank(2, fn)
    assert "--hidden differs between ranks: 0 on rank 0; 64 on rank 1; --mix differs too" in (
        message
    )


def test_problems_are_reported_once_each_with_their_ranks():
    def fn(comm):
        problem = "--data /d/train does not exist" if comm.rank in (1, 3) else None
        check_settings(comm, [("--lr", 0.1)], problem)

    [message, *_] = errors_on_every_rank(4, fn)
    assert message == "ranks 1, 3 of 4: --data /d/train does not exist"


def test_a_problem_on_every_rank_is_said_once_without_ranks():
    [message, *_] = errors_on_every_rank(3, lambda c: check_start(c, "Error: no such option"))
    assert message == "Error: no such option"


def test_a_start_error_on_some_ranks_says_the_ranks_were_started_differently():
    def fn(comm):
        check_start(comm, "Error: no such option" if comm.rank == 1 else None)

    [message, *_] = errors_on_every_rank(3, fn)
    assert message.startswith("rank 1 of 3: Error: no such option (ranks 0, 2 started without")


def test_identical_settings_pass_and_cost_one_collective():
    items = [("--lr", 0.1), ("data: class names", ("ant", "bee")), ("--offload", [])]
    assert run_ranks(3, lambda c: check_settings(c, items), timeout=60) == [None] * 3
    assert run_ranks(3, lambda c: check_start(c), timeout=60) == [None] * 3


def test_values_travel_as_exact_codes():
    assert encode(0.1) != encode(0.1 + 1e-17 + 1e-16)
    assert encode(("ant", "bee")) != encode(("ant", "cow"))


def test_every_shared_option_is_compared():
    """A new option cannot escape the comparison: every TrainConfig field but the rank-local
    paths is an item, by its flag."""
    cfg = TrainConfig()
    labels = {label for label, _ in preflight.settings_items(cfg, _Comm(), None)}
    for name in cfg.to_dict():
        assert (("--" + name.replace("_", "-")) in labels) == (name not in RANK_LOCAL), name


class _Comm:
    rank, size = 0, 1


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    a = make_image_folder(tmp_path / "a")
    return a, Path(shutil.copytree(a, tmp_path / "b"))


def _prepare_with(data: list[Path], tmp_path: Path, **flags):
    def fn(comm):
        cfg = TrainConfig.from_flags(
            arch="cnn",
            image_size=32,
            batch_size=2,
            workers=0,
            data=str(data[comm.rank]),
            progress=False,
            **flags,
        )
        preflight.prepare(cfg, comm)

    return fn


def _rename(root: Path) -> None:
    for split in ("train", "val"):
        (root / split / "cat").rename(root / split / "cow")


def _fewer(root: Path) -> None:
    (root / "train" / "ant" / "0.jpg").unlink()
    (root / "train" / "ant" / "1.jpg").unlink()


def _extra(root: Path) -> None:
    for split in ("train", "val"):
        shutil.copytree(root / split / "cat", root / split / "dog")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_rename, "data: class names differs between ranks: ('ant', 'bee', 'cat') on rank 0; "),
        (_fewer, "data: train images differs between ranks: 12 on rank 0; 10 on rank 1"),
        (_extra, "data: class names differs between ranks: ('ant', 'bee', 'cat') on rank 0; "),
    ],
    ids=["renamed class folder", "fewer images", "extra class"],
)
def test_what_each_rank_found_in_its_data_is_compared(folders, tmp_path, change, expected):
    """The issue's cases: renamed class folders trained silently (label i meant another
    class on each rank), fewer images ended in a misleading timeout, an extra class in an
    MPI error stack."""
    a, b = folders
    change(b)
    [message, *_] = errors_on_every_rank(2, _prepare_with([a, b], tmp_path))
    assert message.startswith(expected), message


def test_uneven_shards_give_every_rank_the_same_steps_per_epoch(tmp_path: Path):
    """11 images over 2 ranks: shards of 6 and 5. With -b 3 rank 0 used to do 2 steps per
    epoch and rank 1 one, and the job hung at the epoch's end."""
    data = make_image_folder(tmp_path / "d")
    (data / "train" / "ant" / "3.jpg").unlink()

    def fn(comm):
        cfg = TrainConfig.from_flags(
            arch="cnn", image_size=32, batch_size=3, workers=0, data=str(data), progress=False
        )
        source, _ = preflight.prepare(cfg, comm)
        return source.steps_per_epoch

    assert run_ranks(2, fn, timeout=60) == [1, 1]
