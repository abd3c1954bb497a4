"""The shuffle worker on the in-process world: multiset, determinism, errors, stop, resume."""

from __future__ import annotations

import io
import logging
import random
import threading
import time

import numpy as np
import pytest
import torch

from gossipgrad.comm.base import Tag
from gossipgrad.comm.local import run_ranks
from gossipgrad.runtime import _RankFormatter
from gossipgrad.shuffle import ShardDataset, ShardStore, ShuffleError, ShuffleWorker

SHARD = 10
DIM = 64


def make_store(rank: int, kind: str = "tensor") -> ShardStore:
    """Slot i of rank r holds sample id r*SHARD+i, label id % 7, payload derived from the id."""
    ids = np.arange(rank * SHARD, (rank + 1) * SHARD)
    if kind == "tensor":
        return ShardStore.of_tensors(
            ids, ids % 7, torch.tensor(ids, dtype=torch.float32).unsqueeze(1).repeat(1, DIM)
        )
    if kind == "bytes":
        return ShardStore.of_bytes(ids, ids % 7, [str(i).encode() * (i % 5) for i in ids])
    return ShardStore.of_indices(ids, ids % 7)


def assert_consistent(store: ShardStore) -> None:
    s = store.read_all()
    assert np.array_equal(s.labels, s.ids % 7)
    if store.kind == "tensor":
        assert torch.equal(
            s.payload, torch.tensor(s.ids, dtype=torch.float32).unsqueeze(1).expand(-1, DIM)
        )
    elif store.kind == "bytes":
        assert s.payload == [str(i).encode() * (i % 5) for i in s.ids]


def run_shuffle(size: int, steps: int, kind: str = "tensor", **kw) -> list[np.ndarray]:
    """Run ``steps`` steps on every rank; return ids[step, rank, slot] after each on_step."""
    seen = np.full((steps, size, SHARD), -1, dtype=np.int64)

    def body(comm):
        store = make_store(comm.rank, kind)
        with ShuffleWorker(store, comm, **{"samples": 3, "seed": 1, **kw}) as worker:
            for step in range(steps):
                worker.on_step(step)
                seen[step, comm.rank] = store.sample_ids()
        assert_consistent(store)
        return store.sample_ids()

    final = run_ranks(size, body, timeout=100)
    return seen, final


def assert_multiset(seen: np.ndarray, final: list[np.ndarray], size: int) -> None:
    everyone = np.arange(size * SHARD)
    for step, row in enumerate(seen):
        assert np.array_equal(np.sort(row.reshape(-1)), everyone), f"step {step}"
    assert np.array_equal(np.sort(np.concatenate(final)), everyone)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [1, 2, 3, 7, 8])
def test_thousand_rounds_keep_the_multiset(size: int) -> None:
    seen, final = run_shuffle(size, 1000)
    assert_multiset(seen, final, size)
    if size > 1:
        moved = np.mean(seen[-1] // SHARD != np.arange(size)[:, None])
        assert moved > 0.5 * (size - 1) / size, "samples should have left their home rank"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["bytes", "index"])
def test_other_payload_kinds(kind: str) -> None:
    seen, final = run_shuffle(7, 300, kind=kind, every=2)
    assert_multiset(seen, final, 7)


@pytest.mark.timeout(120)
def test_same_seed_same_contents_thread_or_inline() -> None:
    a, _ = run_shuffle(3, 60, every=2)
    b, _ = run_shuffle(3, 60, every=2)
    c, _ = run_shuffle(3, 60, every=2, mode="inline")
    d, _ = run_shuffle(3, 60, every=2, seed=2)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    assert not np.array_equal(a, d)
    assert np.array_equal(a[0], a[1]), "a round is applied only at the next boundary"


class FailingComm:
    """Wraps a communicator; its duplicate raises when sending round ``fail_round``."""

    def __init__(self, inner, fail_round: int | None = None) -> None:
        self.inner, self.fail_round = inner, fail_round
        self.rank, self.size, self.timeout = inner.rank, inner.size, inner.timeout
        self.policy = inner.policy

    def isend(self, buf, dst, tag, ctx=None):
        if tag == Tag.SHUFFLE_META and ctx is not None and ctx.step == self.fail_round:
            raise RuntimeError("injected failure")
        return self.inner.isend(buf, dst, tag, ctx)

    def irecv(self, buf, src, tag, ctx=None):
        return self.inner.irecv(buf, src, tag, ctx)

    def dup(self):
        return FailingComm(self.inner.dup(), self.fail_round)


@pytest.mark.timeout(60)
def test_worker_error_surfaces_in_the_training_thread() -> None:
    def body(comm):
        comm = FailingComm(comm, fail_round=5 if comm.rank == 2 else None)
        with ShuffleWorker(make_store(comm.rank), comm, samples=2) as worker:
            for step in range(20):
                worker.on_step(step)
                time.sleep(0.01)

    with pytest.raises(ShuffleError, match=r"rank 2, shuffle round 5 .*injected failure"):
        run_ranks(7, body, timeout=50, comm_timeout=20)


@pytest.mark.timeout(60)
def test_a_rank_that_stops_early_is_named_by_its_partners() -> None:
    def body(comm):
        t0 = time.monotonic()
        try:
            with ShuffleWorker(make_store(comm.rank), comm, samples=2, timeout=1.0) as worker:
                for step in range(4 if comm.rank == 0 else 30):
                    worker.on_step(step)
        except ShuffleError as exc:
            return str(exc), time.monotonic() - t0
        return None, time.monotonic() - t0

    results = run_ranks(5, body, timeout=40)
    assert results[0][0] is None, "rank 0 finished its rounds cleanly"
    errors = [msg for msg, _ in results if msg]
    assert errors and any("peer 0" in m and "CommTimeout" in m for m in errors), errors
    assert max(t for _, t in results) < 20


@pytest.mark.timeout(60)
@pytest.mark.parametrize("every", [1, 3])
def test_stop_mid_round_leaves_no_stuck_rank(every: int) -> None:
    def body(comm):
        store = make_store(comm.rank)
        worker = ShuffleWorker(store, comm, samples=4, every=every)
        for step in range(7 * every):  # the last on_step starts a round
            worker.on_step(step)
        time.sleep(random.random() * 0.2)  # ranks reach stop() at different times
        worker.stop()
        worker.stop()  # idempotent
        assert worker._thread is None or not worker._thread.is_alive()
        assert worker.rounds_done == 7
        assert_consistent(store)
        return store.sample_ids()

    final = run_ranks(7, body, timeout=30, comm_timeout=10)
    assert np.array_equal(np.sort(np.concatenate(final)), np.arange(7 * SHARD))


@pytest.mark.timeout(60)
def test_exception_in_the_loop_cancels_the_round_promptly() -> None:
    def body(comm):
        if comm.rank == 0:
            time.sleep(2.0)  # rank 0 is late: the others' round 0 cannot finish yet
        t0 = time.monotonic()
        with (
            pytest.raises(KeyError),
            ShuffleWorker(make_store(comm.rank), comm, samples=2) as worker,
        ):
            worker.on_step(0)
            raise KeyError("the trainer failed")
        return time.monotonic() - t0

    took = run_ranks(4, body, timeout=30, comm_timeout=20)
    assert max(took) < 1.0, f"stop(cancel=True) must not wait for the 20 s deadline: {took}"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["tensor", "bytes"])
def test_state_dict_round_trip_resumes_identically(kind: str) -> None:
    steps, cut, kw = 20, 10, {"samples": 3, "every": 3, "seed": 4}
    reference, _ = run_shuffle(3, steps, kind=kind, **kw)
    saved: dict[int, bytes] = {}

    def first(comm):
        with ShuffleWorker(make_store(comm.rank, kind), comm, **kw) as worker:
            for step in range(cut):
                worker.on_step(step)
            state = worker.state_dict()
        assert state["pending"], "step 9 started a round that is saved unapplied"
        buf = io.BytesIO()
        torch.save(state, buf)
        saved[comm.rank] = buf.getvalue()

    def second(comm):
        store = make_store(comm.rank, kind)
        rows = []
        with ShuffleWorker(store, comm, **kw) as worker:
            state = torch.load(io.BytesIO(saved[comm.rank]), weights_only=True)
            worker.load_state_dict(state)
            for step in range(cut, steps):
                worker.on_step(step)
                rows.append(store.sample_ids())
        assert_consistent(store)
        return np.stack(rows)

    run_ranks(3, first, timeout=40)
    resumed = run_ranks(3, second, timeout=40)
    for rank in range(3):
        assert np.array_equal(resumed[rank], reference[cut:, rank])


def test_load_state_dict_rejects_another_plan() -> None:
    def body(comm):
        with ShuffleWorker(make_store(comm.rank), comm, samples=3) as w:
            state = w.state_dict()
        with (
            ShuffleWorker(make_store(comm.rank), comm, samples=2) as w,
            pytest.raises(ValueError, match="--shuffle-samples"),
        ):
            w.load_state_dict(state)

    run_ranks(2, body, timeout=20)


@pytest.mark.timeout(60)
def test_reader_thread_never_sees_a_torn_batch_while_rounds_run() -> None:
    def body(comm):
        store = make_store(comm.rank)
        ds, stop, bad = ShardDataset(store, with_ids=True), threading.Event(), []

        def read() -> None:
            while not stop.is_set():
                batch = ds.__getitems__(list(range(SHARD)))
                ids = [i for _, _, i in batch]
                if len(set(ids)) != len(ids):
                    bad.append(ids)
                bad.extend(i for x, y, i in batch if y != i % 7 or not bool((x == i).all()))

        reader = threading.Thread(target=read)
        reader.start()
        try:
            with ShuffleWorker(store, comm, samples=5) as worker:
                for step in range(300):
                    worker.on_step(step)
        finally:
            stop.set()
            reader.join()
        return bad

    assert run_ranks(3, body, timeout=50) == [[], [], []]


def test_arguments_and_mode_resolution(caplog) -> None:
    class SerialisedComm(FailingComm):
        lock = threading.RLock()

    def body(comm):
        with pytest.raises(ValueError, match="--shuffle-every"):
            ShuffleWorker(make_store(comm.rank), comm, samples=1, every=0)
        with pytest.raises(ValueError, match="--shuffle-samples"):
            ShuffleWorker(make_store(comm.rank), comm, samples=SHARD + 1)
        with pytest.raises(ValueError, match="THREAD_MULTIPLE"):
            ShuffleWorker(make_store(comm.rank), SerialisedComm(comm), samples=1, mode="thread")
        with ShuffleWorker(make_store(comm.rank), SerialisedComm(comm), samples=1) as w:
            assert w.mode == "inline" and w._thread is None
            w.on_step(0)
            w.on_step(1)
            with pytest.raises(ValueError, match="must increase"):
                w.on_step(1)
        with ShuffleWorker(make_store(comm.rank), comm, samples=1) as w:
            assert w.mode == "thread"

    with caplog.at_level(logging.INFO, logger="gossipgrad.shuffle.worker"):
        run_ranks(2, body, timeout=20)
    inline = [r for r in caplog.records if "inline mode" in r.getMessage()]
    assert inline, [r.getMessage() for r in caplog.records]
    # the rank prefix is the log formatter's, once, not the message's own as well
    line = _RankFormatter(0, 2).format(inline[0])
    assert line.startswith("[r0/2] INFO gossipgrad.shuffle.worker: shuffle: inline mode"), line
    assert line.count("[r") == 1, line


@pytest.mark.timeout(30)
def test_ranks_with_different_sample_shapes_are_told_so() -> None:
    def body(comm):
        data = torch.zeros(SHARD, 4 if comm.rank == 0 else 8)
        store = ShardStore.of_tensors(
            np.arange(SHARD) + comm.rank * SHARD, np.zeros(SHARD, dtype=int), data
        )
        with ShuffleWorker(store, comm, samples=2, timeout=5) as worker:
            for step in range(3):
                worker.on_step(step)

    with pytest.raises(ShuffleError, match="same sample shape and dtype"):
        run_ranks(2, body, timeout=20)
