"""A rank's shard of samples: changed by shuffle rounds, read by the training loop.

Every slot holds ``(sample id, label, payload)``; sample ids are global and unique, so the
multiset of samples over all ranks can be checked at any time. Three payload kinds
(:class:`PayloadKind`):

- ``tensor``: decoded samples in memory, one shape and dtype for all (``data[n, *shape]``);
- ``bytes``: encoded samples of any length (e.g. JPEG files read from node-local disk), kept
  in memory as ``bytes``; they travel as a lengths vector followed by one byte buffer;
- ``index``: no payload; the sample id indexes a dataset on a shared file system.

No-torn-batch rule: the store changes only in :meth:`ShardStore.write_`, which replaces all
slots of one shuffle round under the store lock and then bumps ``version``; readers copy the
slots they need with one :meth:`ShardStore.read` per batch, under the same lock. So a batch
always reflects the store at exactly one version, never half of a round (no slot with a new
id and an old payload, no sample twice in a batch). Example::

    >>> import torch
    >>> store = ShardStore.of_tensors([7, 9], [1, 0], torch.zeros(2, 3))
    >>> s = store.read([1])
    >>> (s.ids.tolist(), s.labels.tolist(), tuple(s.payload.shape), s.version)
    ([9], [0], (1, 3), 0)
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["PayloadKind", "Sample", "Samples", "ShardStore", "pack_samples", "unpack_samples"]


class PayloadKind(enum.StrEnum):
    TENSOR = "tensor"
    BYTES = "bytes"
    INDEX = "index"


class Sample(NamedTuple):
    """One slot's contents: the payload is a tensor, ``bytes`` or None (index kind)."""

    sample_id: int
    label: int
    payload: Any


@dataclass
class Samples:
    """Copies of some slots' contents, in slot order, taken at store ``version``."""

    ids: np.ndarray  # int64 [k]
    labels: np.ndarray  # int64 [k]
    payload: torch.Tensor | list[bytes] | None  # [k, *shape] | k blobs | None
    version: int = -1

    def __len__(self) -> int:
        return len(self.ids)

    def items(self) -> list[Sample]:
        pay = self.payload if self.payload is not None else [None] * len(self)
        return [
            Sample(int(i), int(y), p) for i, y, p in zip(self.ids, self.labels, pay, strict=True)
        ]


def _int64(values: Any, what: str) -> np.ndarray:
    arr = np.asarray(values.numpy() if isinstance(values, torch.Tensor) else values)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{what} must be a 1-D integer array, got shape {arr.shape} {arr.dtype}")
    return arr.astype(np.int64, copy=True)


class ShardStore:
    """One rank's samples, safe to read from several threads while rounds are written.

    Build with :meth:`of_tensors`, :meth:`of_bytes` or :meth:`of_indices`. The shard length
    never changes. ``read`` returns copies; ``write_`` modifies the store in place.
    """

    def __init__(self, kind: PayloadKind | str, ids: Any, labels: Any, payload: Any = None):
        self.kind = PayloadKind(kind)
        self._ids = _int64(ids, "ids")
        self._labels = _int64(labels, "labels")
        n = len(self._ids)
        if n == 0:
            raise ValueError("a shard store needs at least one sample")
        if len(self._labels) != n:
            raise ValueError(f"{n} ids but {len(self._labels)} labels")
        if len(np.unique(self._ids)) != n:
            raise ValueError("sample ids in a shard must be unique")
        self._payload = self._check_payload(payload, n)
        self.lock = threading.Lock()
        self.version = 0

    def _check_payload(self, payload: Any, n: int) -> Any:
        if self.kind is PayloadKind.INDEX:
            if payload is not None:
                raise ValueError("an index store has no payload; pass payload=None")
            return None
        if self.kind is PayloadKind.TENSOR:
            if not isinstance(payload, torch.Tensor) or payload.ndim < 1 or len(payload) != n:
                raise ValueError(f"tensor payload must be a tensor with {n} rows")
            if payload.is_cuda:
                raise ValueError("keep the shard in host memory; move batches to the GPU")
            return payload.contiguous().clone()
        blobs = [bytes(b) for b in payload] if payload is not None else []
        if len(blobs) != n:
            raise ValueError(f"bytes payload must hold {n} blobs, got {len(blobs)}")
        return blobs

    @classmethod
    def of_tensors(cls, ids: Any, labels: Any, data: torch.Tensor) -> ShardStore:
        """Decoded samples: ``data[i]`` is slot i's sample (copied in)."""
        return cls(PayloadKind.TENSOR, ids, labels, data)

    @classmethod
    def of_bytes(cls, ids: Any, labels: Any, blobs: Sequence[bytes]) -> ShardStore:
        """Encoded samples of any length: ``blobs[i]`` is slot i's file contents."""
        return cls(PayloadKind.BYTES, ids, labels, blobs)

    @classmethod
    def of_indices(cls, ids: Any, labels: Any) -> ShardStore:
        """Sample indices into a dataset every rank can read (shared file system)."""
        return cls(PayloadKind.INDEX, ids, labels)

    def __len__(self) -> int:
        return len(self._ids)

    def __repr__(self) -> str:
        return f"ShardStore(kind={self.kind.value!r}, len={len(self)}, version={self.version})"

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample (tensor kind only)."""
        return tuple(self._payload.shape[1:]) if self.kind is PayloadKind.TENSOR else ()

    @property
    def dtype(self) -> torch.dtype | None:
        return self._payload.dtype if self.kind is PayloadKind.TENSOR else None

    def read(self, slots: Any) -> Samples:
        """Copies of ``slots`` (in that order), all taken at one version (one lock hold)."""
        idx = np.array(slots, dtype=np.int64).reshape(-1)
        with self.lock:
            if self.kind is PayloadKind.TENSOR:
                payload = self._payload[torch.from_numpy(idx)]
            elif self.kind is PayloadKind.BYTES:
                payload = [self._payload[i] for i in idx]
            else:
                payload = None
            return Samples(self._ids[idx], self._labels[idx], payload, self.version)

    def read_all(self) -> Samples:
        return self.read(np.arange(len(self)))

    def write_(self, slots: Any, samples: Samples) -> None:
        """Replace ``slots`` with ``samples`` (in order) in place, atomically for readers."""
        idx = np.array(slots, dtype=np.int64).reshape(-1)
        if len(idx) != len(samples):
            raise ValueError(f"{len(idx)} slots but {len(samples)} samples")
        payload = samples.payload
        if self.kind is PayloadKind.TENSOR:
            if payload is None or tuple(payload.shape[1:]) != self.sample_shape:
                raise ValueError(f"samples of shape {self.sample_shape} expected")
            payload = payload.to(self.dtype)
        elif self.kind is PayloadKind.BYTES and (payload is None or len(payload) != len(idx)):
            raise ValueError(
                f"{len(idx)} slots but {0 if payload is None else len(payload)} encoded samples"
            )
        with self.lock:
            self._ids[idx] = samples.ids
            self._labels[idx] = samples.labels
            if self.kind is PayloadKind.TENSOR:
                self._payload[torch.from_numpy(idx)] = payload
            elif self.kind is PayloadKind.BYTES:
                for i, blob in zip(idx.tolist(), payload, strict=True):
                    self._payload[i] = bytes(blob)
            self.version += 1

    def sample_ids(self) -> np.ndarray:
        """A copy of the sample id in every slot."""
        with self.lock:
            return self._ids.copy()

    def state_dict(self) -> dict[str, Any]:
        """Slot contents as plain tensors (loadable with ``torch.load(weights_only=True)``)."""
        return pack_samples(self.kind, self.read_all())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace every slot with the saved contents; kind, length and shape must match."""
        if state.get("kind") != self.kind.value:
            raise ValueError(
                f"checkpoint holds a {state.get('kind')!r} shard, this store is {self.kind.value!r}"
            )
        samples = unpack_samples(state, self.sample_shape, self.dtype)
        if len(samples) != len(self):
            raise ValueError(
                f"checkpoint shard has {len(samples)} samples, this store {len(self)}"
                "; resume with the same --partition, dataset and number of ranks"
            )
        self.write_(np.arange(len(self)), samples)


def pack_samples(kind: PayloadKind, samples: Samples) -> dict[str, Any]:
    """``samples`` as a dict of tensors and strings (no pickled Python objects)."""
    state: dict[str, Any] = {
        "kind": kind.value,
        "ids": torch.from_numpy(samples.ids.copy()),
        "labels": torch.from_numpy(samples.labels.copy()),
    }
    if kind is PayloadKind.TENSOR:
        state["payload"] = samples.payload.clone()
    elif kind is PayloadKind.BYTES:
        state["lengths"] = torch.tensor([len(b) for b in samples.payload], dtype=torch.int64)
        flat = b"".join(samples.payload)
        state["data"] = (
            torch.frombuffer(bytearray(flat), dtype=torch.uint8)
            if flat
            else torch.zeros(0, dtype=torch.uint8)
        )
    return state


def unpack_samples(
    state: dict[str, Any], shape: tuple[int, ...] = (), dtype: torch.dtype | None = None
) -> Samples:
    """Inverse of :func:`pack_samples`."""
    kind = PayloadKind(state["kind"])
    ids = state["ids"].numpy().astype(np.int64)
    labels = state["labels"].numpy().astype(np.int64)
    payload: Any = None
    if kind is PayloadKind.TENSOR:
        payload = state["payload"]
        if tuple(payload.shape[1:]) != shape or payload.dtype != dtype:
            raise ValueError(
                f"checkpoint samples are {tuple(payload.shape[1:])} {payload.dtype}, "
                f"the store holds {shape} {dtype}"
            )
    elif kind is PayloadKind.BYTES:
        data = state["data"].numpy().tobytes()
        ends = np.cumsum(state["lengths"].numpy())
        payload = [
            data[e - n : e] for e, n in zip(ends.tolist(), state["lengths"].tolist(), strict=True)
        ]
    return Samples(ids, labels, payload)
