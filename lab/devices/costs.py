"""What each leaf module of a model costs per training step: operations and bytes moved.

    costs = layer_costs(model, (3, 224, 224), batch=64)      # on the meta device: free
    forward_s, backward_s = costs[0].seconds(P100_SXM2)      # a roofline on its peaks

Counted per call with a forward hook on every leaf while the model runs on meta tensors
(``torch.func.functional_call``; nothing is computed, nothing copied): convolutions and
Linear layers 2 x multiply-adds (+ bias), normalisations 5 operations per element,
pooling kernel-size per output, activations and dropout 1 per element; bytes = inputs +
outputs + parameters read, at the precision's element size. Backward: the weight gradient
costs the forward's operations again and the input gradient (skipped where the input needs
none, as for the first layer) once more; bytes about twice the forward's. A phase of a
layer takes ``max(ops / peak_flops, bytes / bandwidth)`` on a :class:`Gpu`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from gossipgrad.tools.devices.shapes import leaf_modules

ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
MATMUL = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)
NORMS = (
    torch.nn.modules.batchnorm._NormBase,
    torch.nn.LayerNorm,
    torch.nn.GroupNorm,
)
POOLS = (torch.nn.modules.pooling._MaxPoolNd, torch.nn.modules.pooling._AvgPoolNd)
VIEWS = (torch.nn.Flatten, torch.nn.Identity, torch.nn.Unflatten)


@dataclass(frozen=True)
class Gpu:
    """Datasheet peaks of one GPU at one precision."""

    name: str
    peak_flops: float  # floating-point operations per second
    bandwidth: float  # memory bytes per second


@dataclass
class LayerCost:
    name: str
    kind: str
    calls: int = 0
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    macs: float = 0.0

    def seconds(self, gpu: Gpu) -> tuple[float, float]:
        return (
            max(self.fwd_flops / gpu.peak_flops, self.fwd_bytes / gpu.bandwidth),
            max(self.bwd_flops / gpu.peak_flops, self.bwd_bytes / gpu.bandwidth),
        )


def _numel(xs: Any) -> int:
    return sum(
        t.numel() for t in torch.utils._pytree.tree_flatten(xs)[0] if isinstance(t, torch.Tensor)
    )


def _count(cost: LayerCost, m: torch.nn.Module, args: tuple, out: Any, elem: int) -> None:
    """Add one call of ``m`` to ``cost``."""
    n_in, n_out = _numel(args), _numel(out)
    params = sum(p.numel() for p in m.parameters(recurse=False))
    needs_in = any(isinstance(t, torch.Tensor) and t.requires_grad for t in args)
    if isinstance(m, VIEWS):
        cost.calls += 1
        return
    if isinstance(m, MATMUL):
        fan_in = m.weight.numel() // m.weight.shape[0]  # in/groups x kernel, or in_features
        macs = n_out * fan_in
        flops = 2.0 * macs + (n_out if m.bias is not None else 0)
        cost.macs += macs
        back = flops + (flops if needs_in else 0.0)
    else:
        if isinstance(m, NORMS):
            flops = 5.0 * n_in
        elif isinstance(m, POOLS):
            k = m.kernel_size
            spatial = max(1, out.dim() - 2) if isinstance(out, torch.Tensor) else 1
            flops = float(n_out * math.prod(k if isinstance(k, tuple) else (k,) * spatial))
        else:
            flops = float(max(n_in, n_out))
        back = flops if (needs_in or params) else 0.0
    cost.calls += 1
    cost.fwd_flops += flops
    cost.fwd_bytes += (n_in + n_out + params) * elem
    cost.bwd_flops += back
    if back:
        cost.bwd_bytes += (n_out + n_in + (n_in if needs_in else 0) + 2 * params) * elem


def layer_costs(
    model: torch.nn.Module, sample_shape: tuple[int, ...], batch: int, precision: str = "fp32"
) -> list[LayerCost]:
    """Per-leaf costs of one training step at ``batch`` (meta device: nothing computed)."""
    elem = ELEMENT_BYTES[precision]
    costs = {name: LayerCost(name, type(m).__name__) for name, m in leaf_modules(model)}
    hooks = [
        m.register_forward_hook(lambda mod, a, o, c=costs[name]: _count(c, mod, a, o, elem))
        for name, m in leaf_modules(model)
    ]
    state = {
        k: v.detach().to("meta").requires_grad_(v.requires_grad)
        for k, v in model.named_parameters()
    }
    state.update({k: v.detach().to("meta") for k, v in model.named_buffers() if v is not None})
    try:
        model.train()
        torch.func.functional_call(
            model, state, (torch.empty(batch, *sample_shape, device="meta"),), tie_weights=True
        )
    finally:
        for h in hooks:
            h.remove()
    return list(costs.values())
