"""No wait without a deadline, I/O included (docs/guarantees.md, 4), in one process: a sample
whose read blocks (a FIFO standing in for a stalled network file system) ends with an error
naming the file and the rank, within the read deadline, with or without DataLoader workers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from imagefolder import make_image_folder

from gossipgrad.data.deadline import DeadlineReader, Stalled
from gossipgrad.data.images import ImageFolderSource


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_a_read_that_blocks_is_abandoned_at_its_deadline(tmp_path: Path):
    fifo = tmp_path / "stalled.jpg"
    os.mkfifo(fifo)
    reader = DeadlineReader(0.5)
    t0 = time.monotonic()
    with pytest.raises(Stalled, match=rf"reading {fifo} did not finish within 0.5 s"):
        reader.call(_read, str(fifo))
    assert time.monotonic() - t0 < 5
    ok = tmp_path / "ok"
    ok.write_bytes(b"fine")
    assert reader.call(_read, str(ok)) == b"fine"  # a fresh thread serves the next read


def test_errors_of_the_read_reach_the_caller(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        DeadlineReader(5).call(_read, str(tmp_path / "missing"))


@pytest.mark.parametrize("workers", [0, 1])
def test_a_stalled_image_names_the_file_and_the_rank(tmp_path: Path, workers: int):
    data = make_image_folder(tmp_path / "data")
    fifo = data / "train" / "bee" / "9.jpg"
    os.mkfifo(fifo)
    source = ImageFolderSource(str(data), 32, 13, workers, 0, 0, 1, read_timeout=1.0)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=rf"rank 0: reading {fifo} did not finish within 1 s"):
        for _ in source.train_batches(0):
            pass
    assert time.monotonic() - t0 < 15, "the read deadline did not hold"


def test_a_stall_is_not_skipped_as_corrupt(tmp_path: Path):
    data = make_image_folder(tmp_path / "data")
    os.mkfifo(data / "train" / "bee" / "9.jpg")
    source = ImageFolderSource(str(data), 32, 13, 0, 0, 0, 1, skip_corrupt=True, read_timeout=1)
    with pytest.raises(ValueError, match="did not finish within 1 s"):
        list(source.train_batches(0))
