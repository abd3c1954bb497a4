"""``hvd.DistributedOptimizer`` on gossipgrad: Horovod's signature, gossip's exchange.

Horovod's optimizer gets no model, only ``named_parameters``: it averages gradients, so
the parameters are all it needs. The face builds gossipgrad's bucket optimizer over a
module that holds those parameters, and by default gossips with one peer per step, mixing
gradients under Adam and its kin and parameters under SGD (``options.default_mix``;
docs/guide.md, "Choosing strategy, mix and lag").
Pass ``model=`` to give it the real module (then ``mix="param"`` can overlap its exchange
with the forward pass), and any exchange option as a keyword or ``GOSSIPGRAD_<OPTION>``.

Horovod's arguments: ``compression`` chooses the wire codec, ``backward_passes_per_step``
the accumulation; ``op=hvd.Average`` (the default), ``gradient_predivide_factor=1.0``,
``num_groups=0``, ``groups=None``, ``sparse_as_dense`` and the global process set are
accepted; anything else (Adasum, Sum, another predivide factor, grouping, a process set)
is refused with one line that says what to use. ``synchronize()`` and
``skip_synchronize()`` mean what they mean in Horovod: complete this step's gradient
exchange now, and step without waiting again.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import torch

from gossipgrad.engine.bucket.shell import BucketOptimizer
from gossipgrad.engine.buckets import install_global_forward_waits
from gossipgrad.options import ExchangeOptions, from_environment
from gossipgrad.strategies.bucketed import BucketStrategy
from gossipgrad.torch.compression import Compression, wire_of
from gossipgrad.torch.ops import Op, check_process_set, global_process_set
from gossipgrad.torch.state import communicator, register

_SERIAL = itertools.count()


class HorovodOptimizer(BucketOptimizer):
    """The bucket optimizer with Horovod's meaning of ``synchronize()``.

    ``synchronize()`` completes this step's gradient exchange (the gradients then hold
    the mix); :meth:`average` is the global average of the parameters (gossipgrad's own
    ``DistributedOptimizer.synchronize()``, collective).
    """

    def synchronize(self) -> None:  # Horovod's meaning (see the class docstring)
        self.synchronize_gradients()

    def average(self) -> None:
        """Collective: every rank's parameters become their mean (one consensus model)."""
        self._average()

    @contextlib.contextmanager
    def skip_synchronize(self) -> Iterator[None]:
        """Horovod's: ``step()`` inside does not exchange again after ``synchronize()``
        (it never does here: a step's gradients are exchanged once)."""
        yield

    def _forward_waits(self) -> list[Any]:
        if isinstance(self.model, _Parameters):  # the modules are the script's, unknown here
            return install_global_forward_waits(self._bucket_of, self.timing.wait_)
        return super()._forward_waits()

    def set_backward_passes_per_step(self, passes: int) -> None:
        if passes < 1:
            raise ValueError(f"backward_passes_per_step must be >= 1, got {passes}")
        self._counter.passes = passes


class _Parameters(torch.nn.Module):
    """A module that holds the named parameters and nothing else."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]]) -> None:
        super().__init__()
        for name, p in named:
            self.register_parameter(name.replace(".", "__"), p)


def named_list(optimizer: torch.optim.Optimizer, named_parameters: Any) -> list[tuple[str, Any]]:
    """``named_parameters`` as a list, checked as Horovod checks it: tuples, no name twice,
    and every parameter of the optimizer named (None: the optimizer's own, numbered)."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    if named_parameters is None:
        return [(f"allreduce.noname.{i}", p) for i, p in enumerate(params)]
    named = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named):
        raise ValueError(
            "named_parameters should be a sequence of (name, parameter) tuples, usually "
            "model.named_parameters()"
        )
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise ValueError("named_parameters holds a name twice; every parameter needs its own")
    ids = {id(p) for _, p in named}
    if any(id(p) not in ids for p in params):
        raise ValueError(
            "named_parameters was given, but some parameters of the optimizer are not in "
            "it; pass model.named_parameters() of the model the optimizer trains"
        )
    return [(n, p) for n, p in named if p.requires_grad]


def DistributedOptimizer(  # noqa: N802 - Horovod's name
    optimizer: torch.optim.Optimizer,
    named_parameters: Any = None,
    compression: Any = Compression.none,
    backward_passes_per_step: int = 1,
    op: Op = Op.AVERAGE,
    gradient_predivide_factor: float = 1.0,
    num_groups: int = 0,
    groups: Any = None,
    sparse_as_dense: bool = False,
    process_set: Any = global_process_set,
    *,
    model: torch.nn.Module | None = None,
    **exchange: Any,
) -> HorovodOptimizer:
    """Wrap ``optimizer`` (Horovod's signature; see the module docstring). Collective."""
    check_process_set(process_set)
    refuse_unhonoured(op, gradient_predivide_factor, num_groups, groups)
    comm = communicator()
    if not (hasattr(optimizer, "step") and hasattr(optimizer, "param_groups")):
        raise TypeError(f"DistributedOptimizer takes a torch optimizer first, got {optimizer!r}")
    fields = {**from_environment(ExchangeOptions), **exchange}  # a keyword > its variable
    fields.update(face_arguments(fields, wire_of(compression), backward_passes_per_step))
    if model is None:
        model = _Parameters(named_list(optimizer, named_parameters))
    opts = ExchangeOptions(**fields)  # the mix: bound to the optimizer by the default rule
    if not isinstance(opts.spec, BucketStrategy):
        raise ValueError(
            f"gossipgrad.torch runs the bucket strategies (gossip, allreduce, "
            f"allreduce-param, local), not strategy={opts.strategy!r}; for it use "
            "gossipgrad.DistributedOptimizer(optimizer, model, comm, strategy=...)"
        )
    opt = HorovodOptimizer(
        optimizer, model, comm, opts, shape=opts.spec.exchange_shape, mixers=opts.spec.mixer
    )
    opt.serial = next(_SERIAL)
    register(opt)
    return opt


def face_arguments(fields: dict[str, Any], wire: str, passes: int) -> dict[str, Any]:
    """Horovod's ``compression`` (as ``wire``) and ``backward_passes_per_step`` as exchange
    fields: each wins over a keyword or ``GOSSIPGRAD_*`` variable only where it is not
    Horovod's default; both given and different is a ValueError, never one silently lost.

    >>> face_arguments({"wire": "bf16"}, "fp32", 1)
    {'wire': 'bf16', 'backward_passes_per_step': 1}
    >>> face_arguments({}, "fp16", 2)
    {'wire': 'fp16', 'backward_passes_per_step': 2}
    """
    out = {}
    for key, value, default, arg in (
        ("wire", wire, "fp32", "compression"),
        ("backward_passes_per_step", passes, 1, "backward_passes_per_step"),
    ):
        given = fields.get(key)
        if given is not None and value != default and str(given) != str(value):
            raise ValueError(
                f"{arg}= asks for {key} {value!r}, but {key}={given!r} was also set (a "
                f"keyword or GOSSIPGRAD_{key.upper()}); give one of them"
            )
        out[key] = value if value != default or given is None else given
    return out


def refuse_unhonoured(op: Any, predivide: float, num_groups: int, groups: Any) -> None:
    """One line for each Horovod argument the face cannot honour (never ignored)."""
    if op is not Op.AVERAGE:
        raise ValueError(
            f"op=hvd.{getattr(op, 'name', op)!s} is not supported by gossipgrad.torch's "
            "DistributedOptimizer: gossip averages gradients with its peer; use hvd.Average "
            "(the default; for a sum, scale the learning rate by hvd.size())"
        )
    if predivide != 1.0:
        raise ValueError(
            f"gradient_predivide_factor={predivide} is not supported: gossip mixes with "
            "one peer, so there is no sum to divide; use 1.0 (the default)"
        )
    if num_groups or groups is not None:
        raise ValueError(
            "num_groups / groups are not supported: gossipgrad fuses gradients into "
            "buckets of bucket_mb (GOSSIPGRAD_BUCKET_MB); drop them"
        )
