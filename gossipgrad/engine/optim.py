"""A new torch optimizer of another's kind: what ps owners, offload and factor layers build.

``type(opt)(groups, **opt.defaults)`` is not enough: some optimizers keep defaults their
constructor does not take (AdamW records ``decoupled_weight_decay``), so those are left out.

    >>> import torch
    >>> w = torch.nn.Parameter(torch.zeros(2))
    >>> adamw = torch.optim.AdamW([w], lr=1e-3, weight_decay=0.05)
    >>> copy = rebuild(adamw, [{"params": [torch.nn.Parameter(torch.zeros(2))]}])
    >>> type(copy).__name__, copy.defaults["weight_decay"]
    ('AdamW', 0.05)
"""

from __future__ import annotations

import inspect
from typing import Any

import torch


def rebuild(optimizer: torch.optim.Optimizer, groups: list[dict[str, Any]]) -> Any:
    """``type(optimizer)`` over ``groups`` with ``optimizer``'s defaults (those its
    constructor accepts)."""
    cls = type(optimizer)
    accepted = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    defaults = {k: v for k, v in optimizer.defaults.items() if takes_any or k in accepted}
    return cls(groups, **defaults)


ADAPTIVE = (
    "Adam",
    "AdamW",
    "Adamax",
    "NAdam",
    "RAdam",
    "SparseAdam",
    "Adagrad",
    "Adadelta",
    "RMSprop",
    "Adafactor",
)
"""torch optimizers that scale each parameter's step by statistics of its gradients."""


def is_adaptive(optimizer: Any) -> bool:
    """Whether ``optimizer`` scales steps per parameter (Adam and its kin, or any optimizer
    with Adam's ``betas``): for those, gossip mixes gradients by default.

        >>> import torch
        >>> w = [torch.nn.Parameter(torch.zeros(1))]
        >>> is_adaptive(torch.optim.AdamW(w)), is_adaptive(torch.optim.SGD(w, lr=0.1))
        (True, False)
    """
    for attr in ("optimizer", "original"):  # a wrapper: ours, offload's, a stand-in's
        inner = getattr(optimizer, attr, None)
        if inner is not None and inner is not optimizer and is_adaptive(inner):
            return True
    names = {c.__name__ for c in type(optimizer).__mro__}
    return bool(names & set(ADAPTIVE)) or "betas" in getattr(optimizer, "defaults", {})


ELEMENTWISE = frozenset(
    {
        torch.optim.SGD,
        torch.optim.Adam,
        torch.optim.AdamW,
        torch.optim.Adagrad,
        torch.optim.Adadelta,
        torch.optim.Adamax,
        torch.optim.NAdam,
        torch.optim.RAdam,
        torch.optim.RMSprop,
    }
)
"""torch optimizers whose update of an element reads only that element's gradient and
state: a part of a parameter updated on its own is then updated as in the whole."""


def updates_elementwise(optimizer: Any) -> bool:
    """Whether ``optimizer`` may update parts of a parameter apart (``--strategy ps`` splits
    a large one across owners only then): its class is in :data:`ELEMENTWISE` exactly (a
    subclass, LARS or LAMB may read a parameter's norm, Adafactor its shape), or declares
    ``updates_elementwise = True``; the stand-in device's optimizer answers for the one it
    stands for (``stands_for``).

        >>> import torch
        >>> w = [torch.nn.Parameter(torch.zeros(1))]
        >>> class Mine(torch.optim.SGD):
        ...     pass
        >>> class Declared(torch.optim.SGD):
        ...     updates_elementwise = True
        >>> [updates_elementwise(c(w, lr=0.1)) for c in (torch.optim.SGD, Mine, Declared)]
        [True, False, True]
    """
    cls = type(optimizer)
    declared = getattr(cls, "updates_elementwise", None)
    if isinstance(declared, bool):
        return declared
    return getattr(cls, "stands_for", None) in ELEMENTWISE or cls in ELEMENTWISE
