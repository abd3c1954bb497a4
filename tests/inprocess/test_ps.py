"""``--strategy ps`` in one process: shards, options, the library entry points, and the
multi-rank checks (tests/support/multirank/ps_checks.py) on the thread world at sizes 1-8."""

from __future__ import annotations

import doctest
import re

import pytest
import torch
from click.testing import CliRunner

from gossipgrad.cli import main
from gossipgrad.comm.base import CommTimeout
from gossipgrad.comm.local import LocalWorld, run_ranks
from gossipgrad.engine.ps import shards
from gossipgrad.engine.ps.optimizer import ParameterServerOptimizer
from gossipgrad.engine.run.config import TrainConfig
from gossipgrad.options import ExchangeOptions
from gossipgrad.registry import STRATEGIES
from gossipgrad.strategies import DistributedOptimizer, build_optimizer, handle

from multirank import ps_checks


@pytest.mark.timeout(120)
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("check", ps_checks.ALL, ids=lambda c: c.__name__)
def test_ps_check_in_process(size, check):
    run_ranks(size, check, timeout=100, comm_timeout=30)


def test_shards_doctests():
    result = doctest.testmod(shards)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("size", range(1, 18))
def test_every_rank_serves_a_bucket_and_the_mean_is_ring_bytes(size):
    sizes = [4096] * 3 + [100, 7, 50_000] + [1000 + 13 * i for i in range(size)]
    owners = shards.assign_owners(sizes, size)
    assert sorted(set(owners)) == list(range(size)), owners  # at least size buckets
    load = [sum(b for b, o in zip(sizes, owners, strict=True) if o == r) for r in range(size)]
    assert max(load) <= max(sum(sizes) / size, max(sizes)) + max(sizes), load
    sent = shards.bytes_sent_by_rank(sizes, owners, size)
    assert sum(sent) == 2 * (size - 1) * sum(sizes)
    assert STRATEGIES.get("ps").bytes_per_step(sum(sizes), size) == pytest.approx(sum(sent) / size)


def test_greedy_balance_beats_round_robin():
    sizes = [8, 1, 1, 1, 1, 1, 1, 1, 1]
    owners = shards.assign_owners(sizes, 2)
    load = [sum(b for b, o in zip(sizes, owners, strict=True) if o == r) for r in range(2)]
    assert sorted(load) == [8, 8], owners


def test_ps_bucket_cap_gives_at_least_size_buckets_for_small_parameters():
    assert shards.ps_bucket_cap(1000, 8, 1 << 20) == 125
    assert shards.ps_bucket_cap(1000, 8, 100) == 100  # --bucket-mb still caps
    with pytest.raises(ValueError, match="size"):
        shards.ps_bucket_cap(1000, 0, 100)


def test_ps_is_not_a_library_strategy_and_counts_ring_bytes():
    ps = STRATEGIES.get("ps")
    assert not ps.library and ps.shape == "server"
    assert ps.bytes_per_step(800, 8) == 1400.0 and ps.bytes_per_step(800, 1) == 0.0


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            {"staleness": 1},
            "staleness=1 does not apply to strategy='ps' (its slack is slack S",
        ),
        ({"mix": "param"}, "mix='param' does not apply to strategy='ps'"),
        ({"sync_every": 5}, "sync_every=5 does not apply to strategy='ps'"),
        ({"max_lag": -1}, "max_lag must be >= 0"),
    ],
)
def test_meaningless_ps_combinations_are_refused(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ExchangeOptions(strategy="ps", **flags)


def test_ps_takes_its_slack_and_max_lag_as_its_older_spelling():
    assert ExchangeOptions(strategy="ps", slack=3).slack == 3
    old = ExchangeOptions(strategy="ps", max_lag=3)
    assert (old.slack, old.max_lag) == (3, 0)
    with pytest.raises(ValueError, match="older spelling"):
        ExchangeOptions(strategy="ps", max_lag=3, slack=2)


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["--strategy", "ps", "--staleness", "1"],
            "--staleness 1 does not apply to --strategy ps",
        ),
        (["--strategy", "ps", "--mix", "param"], "--mix param does not apply to --strategy ps"),
        (
            ["--offload", "gpu"],
            "unknown offload 'gpu' (--offload); choose one of: activations, optimizer",
        ),
        (
            ["--strategy", "horovod", "--offload", "optimizer"],
            "--offload optimizer is not available with --strategy horovod",
        ),
        (  # the new user: every parameter cut into 1-byte parts, 1 image/s
            ["--strategy", "ps", "--bucket-mb", "0.000001"],
            "--bucket-mb must be >= 0.000244 (256 bytes: each bucket is a message a step)",
        ),
    ],
)
def test_cli_refuses_bad_combinations_in_one_line(args, message):
    result = CliRunner().invoke(main, ["train", "--no-progress", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len([ln for ln in result.output.splitlines() if ln.startswith("Error")]) == 1


def test_config_carries_offload_as_plain_names():
    cfg = TrainConfig.from_flags(offload="optimizer,activations", strategy="ps", max_lag=2)
    assert cfg.run.offload == ("activations", "optimizer")
    assert cfg.to_dict()["offload"] == ("activations", "optimizer")
    assert cfg.replace(lr=0.2).run.offload == ("activations", "optimizer")


def _one_rank():
    return LocalWorld(1, timeout=30).communicators()[0]


@pytest.mark.parametrize("build", [DistributedOptimizer])
def test_library_entry_points_build_the_parameter_server(build):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    reference.load_state_dict(model.state_dict())
    opt = build(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model, _one_rank(), strategy="ps"
    )
    ref = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    try:
        assert isinstance(handle(opt), ParameterServerOptimizer) and opt.module_for_forward is model
        gen = torch.Generator().manual_seed(0)
        for _ in range(4):  # one rank serves everything: exactly plain SGD
            x, y = torch.randn(16, 4, generator=gen), torch.randint(0, 2, (16,), generator=gen)
            for m, o in ((model, opt), (reference, ref)):
                o.zero_grad()
                torch.nn.functional.cross_entropy(m(x), y).backward()
                o.step()
            for g in opt.param_groups:  # the trainer's learning-rate schedule reaches it
                g["lr"] *= 0.5
            for g in ref.param_groups:
                g["lr"] *= 0.5
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            assert torch.equal(p, q)
        assert opt.consensus_distance() == 0.0 and opt.stats["bytes_sent_per_step"] == 0.0
    finally:
        opt.close()


def test_an_optimizer_with_state_is_refused():
    """State only the owner of a shard may keep (ps) is refused, e.g. a loaded momentum."""
    model = torch.nn.Linear(4, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sgd.state[model.weight]["momentum_buffer"] = torch.ones_like(model.weight)
    with pytest.raises(ValueError, match="has not stepped yet"):
        DistributedOptimizer(sgd, model, _one_rank(), strategy="ps")


@pytest.mark.timeout(60)
def test_a_split_into_too_many_parts_is_refused_saying_what_to_use():
    """Above the floor, a large parameter can still make more parts than a step carries
    well: an 8 MiB weight at the smallest bucket would be 32,768 messages a step."""
    model = torch.nn.Linear(2048, 1024, bias=False)  # 8 MiB
    comm = LocalWorld(1).communicators()[0]
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError) as err:
        DistributedOptimizer(sgd, model, comm, strategy="ps", bucket_mb=2**-12)  # 256 bytes
    message = str(err.value)
    assert "would split the parameters into 32,768 parts" in message, message
    assert "at most 16,384: use bucket_mb 0.000" in message, message
    need = float(message.rsplit("use bucket_mb ", 1)[1].split()[0])
    DistributedOptimizer(sgd, model, comm, strategy="ps", bucket_mb=need).close()  # enough


def test_a_silent_rank_is_named_with_its_tag():
    """Rank 1 builds the optimizer and then never steps: rank 0 fails within the deadline,
    naming rank 1 and a ps tag, instead of hanging. (Two ranks: with more, a rank may
    first time out on a third rank that is itself stuck on rank 1, and name that one.)"""

    def body(comm):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 32),
            torch.nn.ReLU(),
            torch.nn.Linear(32, 32),
            torch.nn.ReLU(),
            torch.nn.Linear(32, 4),
        )
        opt = build_optimizer(
            torch.optim.SGD(model.parameters(), lr=0.1), model, comm, strategy="ps", bucket_mb=0.001
        )
        if comm.rank == 1:
            return None
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
        return None

    with pytest.raises(CommTimeout) as info:
        run_ranks(2, body, timeout=40, comm_timeout=2)
    msg = str(info.value)
    assert re.search(
        r"rank 0, step \d+: .*(owner, rank 1|rank\(s\) \[[\d, ]*\b1\b"
        r"[\d, ]*\]).*PS_(PUSH|PULL)_\d+",
        msg,
    ), msg
    assert "for 2 s" in msg and "raise gossipgrad.init(timeout=SECONDS)" in msg
