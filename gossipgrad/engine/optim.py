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
