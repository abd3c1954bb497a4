"""A toy wire codec, registered from the tests alone: it negates on encode and on decode,
so what travels is not the bucket but the result is the same bit for bit (negation is
exact), and it counts its calls so a test can see every path went through it.
``--wire toy-negate`` after ``import toy_codec`` (``GOSSIPGRAD_PLUGINS=toy_codec``)."""

from __future__ import annotations

import collections
import threading

import torch

from gossipgrad.comm.codecs import Codec
from gossipgrad.registry import CODECS

NAME = "toy-negate"
CALLS: collections.Counter = collections.Counter()  # "encode"/"decode" -> calls, all instances
_LOCK = threading.Lock()


class Negate(Codec):
    name = NAME
    in_place = False  # its encoding is not the buffer itself
    lossless = True
    summable = True  # -(a) + -(b) = -(a + b): an allreduce may add encodings

    def encode_(self, src: torch.Tensor, wire: torch.Tensor, key: int) -> torch.Tensor:
        with _LOCK:
            CALLS["encode"] += 1
        torch.neg(src, out=wire)
        return wire

    def decode(self, wire: torch.Tensor, like: torch.Tensor, key: int) -> torch.Tensor:
        with _LOCK:
            CALLS["decode"] += 1
        return wire.neg_()  # a received wire is the codec's to overwrite


CODECS.register(NAME, Negate, replace=True)
