"""Byte-level text for language models (``--dataset text`` and ``--dataset text:PATH``).

Tokens are the bytes of the files (a vocabulary of 256: any text in any encoding, no
tokenizer to build or ship). ``text`` is the embedded corpus
(:mod:`gossipgrad.data.corpus`); ``text:PATH`` a file, or a folder whose files (every
regular file below it, hidden ones left out, in sorted path order) are read in turn.

Split, fixed: the last :data:`VALIDATION` of every file's bytes is validation, the rest
training; each side's pieces are joined in file order. A sample is a window of
``context + 1`` bytes (the input and, shifted by one, its targets); windows start every
``context`` bytes, so each byte is a target exactly once. A training window's label is the
file it starts in (``--partition sorted`` gives each rank whole files).

    >>> data = text_data([("a", b"abcdefghij" * 3), ("b", b"0123456789" * 2)], context=4)
    >>> tuple(data.train_x.shape), data.train_y.tolist(), tuple(data.test_x.shape)
    ((11, 5), [0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1], (1, 5))
    >>> bytes(data.test_x[0].tolist())
    b'hij89'
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from gossipgrad.data.corpus import read_corpus
from gossipgrad.data.tensors import TensorData
from gossipgrad.models import BYTE_VOCAB

#: The share of every file's bytes (its end) kept for validation.
VALIDATION = 0.1


def is_text(dataset: str) -> bool:
    """Whether ``--dataset`` names text: ``text`` or ``text:PATH``."""
    return dataset == "text" or dataset.startswith("text:")


def read_files(dataset: str) -> list[tuple[str, bytes]]:
    """``(name, contents)`` of every file ``dataset`` names, in order. Raises ValueError
    naming the path for one that is missing, unreadable or holds no bytes."""
    if dataset == "text":
        return read_corpus()
    path = Path(dataset.partition(":")[2])
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    else:
        raise ValueError(
            f"--dataset {dataset}: no such file or folder; give a text file or a folder"
        )
    out = []
    for p in files:
        try:
            out.append((os.path.relpath(p, path) if path.is_dir() else p.name, p.read_bytes()))
        except OSError as exc:
            raise ValueError(f"--dataset {dataset}: cannot read {p}: {exc.strerror}") from None
    if not any(data for _, data in out):
        raise ValueError(f"--dataset {dataset}: no text there (no file, or only empty ones)")
    return out


def windows(stream: np.ndarray, context: int) -> np.ndarray:
    """``[n, context + 1]`` windows of ``stream`` starting every ``context`` bytes (a view)."""
    n = max(0, (len(stream) - 1) // context)
    return np.lib.stride_tricks.as_strided(
        stream, (n, context + 1), (context * stream.strides[0], stream.strides[0]), writeable=False
    )


def text_data(files: list[tuple[str, bytes]], context: int, name: str = "text") -> TensorData:
    """The fixed split of ``files`` cut into windows: uint8 ``[n, context + 1]`` samples,
    the training ones labelled with their file's index. Raises ValueError when either side
    holds less than one window."""
    train, val, starts = [], [], []
    offset = 0
    for _, data in files:
        cut = len(data) - int(len(data) * VALIDATION)
        train.append(data[:cut])
        val.append(data[cut:])
        starts.append(offset)
        offset += cut
    train_stream = np.frombuffer(b"".join(train), dtype=np.uint8)
    val_stream = np.frombuffer(b"".join(val), dtype=np.uint8)
    train_w, val_w = windows(train_stream, context), windows(val_stream, context)
    for side, w, stream in (("training", train_w, train_stream), ("validation", val_w, val_stream)):
        if len(w) == 0:
            raise ValueError(
                f"{name}: its {side} split holds {len(stream)} bytes, less than one window of "
                f"--context {context} + 1; give more text or lower --context"
            )
    labels = np.searchsorted(np.array(starts), np.arange(len(train_w)) * context, side="right") - 1
    return TensorData(
        name,
        torch.from_numpy(train_w.copy()),
        torch.from_numpy(labels.astype(np.int64)),
        torch.from_numpy(val_w.copy()),
        torch.zeros(len(val_w), dtype=torch.int64),
        classes=BYTE_VOCAB,
    )


def digest(files: list[tuple[str, bytes]]) -> str:
    """A sha256 of the names and contents (what every rank must have read alike)."""
    h = hashlib.sha256()
    for name, data in files:
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]
