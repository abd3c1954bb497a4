"""Data partitions for the shuffle: equal shards, no sample twice, the promised skew."""

from __future__ import annotations

import numpy as np
import pytest

from gossipgrad.data.partition import parse_partition, partition

LABELS = np.random.default_rng(0).integers(0, 10, size=1003)


def labels_per_rank(shards: list[np.ndarray]) -> list[int]:
    return [len(np.unique(LABELS[s])) for s in shards]


@pytest.mark.parametrize("kind", ["iid", "sorted", "dirichlet:0.1", "dirichlet:1", "dirichlet:100"])
@pytest.mark.parametrize("size", [1, 2, 3, 7, 8, 17])
def test_equal_disjoint_shards(kind: str, size: int) -> None:
    shards = partition(LABELS, size, kind, seed=3)
    per = len(LABELS) // size
    assert len(shards) == size and all(len(s) == per and s.dtype == np.int64 for s in shards)
    flat = np.concatenate(shards)
    assert len(np.unique(flat)) == len(flat) == per * size
    assert flat.min() >= 0 and flat.max() < len(LABELS)
    again = partition(LABELS, size, kind, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(shards, again, strict=True))


def test_sorted_ranks_see_few_labels_iid_see_all() -> None:
    assert max(labels_per_rank(partition(LABELS, 10, "sorted"))) <= 2
    assert min(labels_per_rank(partition(LABELS, 10, "iid"))) == 10


def test_dirichlet_alpha_controls_skew() -> None:
    def skew(kind: str) -> float:
        shards = partition(LABELS, 8, kind, seed=1)
        top = [np.bincount(LABELS[s], minlength=10).max() / len(s) for s in shards]
        return float(np.mean(top))

    assert skew("dirichlet:0.05") > 0.4 > skew("dirichlet:1000")
    assert skew("dirichlet:1000") < 0.2


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "random",
        "dirichlet",
        "dirichlet:",
        "dirichlet:-1",
        "dirichlet:abc",
        "dirichlet:inf",
        "iid:3",
    ],
)
def test_bad_kinds_name_the_flag(bad: str, cli_names) -> None:
    with pytest.raises(ValueError, match="--partition"):
        parse_partition(bad)
    with pytest.raises(ValueError, match="--partition"):
        partition(LABELS, 2, bad)


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="cannot give"):
        partition(np.arange(3), 4, "iid")
    with pytest.raises(ValueError, match="1-D integer"):
        partition(np.zeros(4), 2, "iid")
    assert parse_partition("dirichlet:0.5") == ("dirichlet", 0.5)
