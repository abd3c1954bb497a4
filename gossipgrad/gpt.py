"""A small decoder-only transformer (GPT) on byte tokens, written with torch only.

    gossipgrad train -a gpt --dataset text --layers 4 --heads 4 --hidden 128 --context 128

Pre-norm blocks (LayerNorm, causal multi-head self-attention, LayerNorm, a 4x GELU MLP),
learned position embeddings, no dropout and no weight tying (every parameter belongs to the
module whose ``forward`` reads it, which parameter mixing's forward waits rely on). The
input is ``[batch, time]`` token ids (int64, ``time <= context``), the output
``[batch, time, vocab]`` logits; :func:`gossipgrad.models.loss_fn` averages the
cross-entropy over every position. Initialisation follows GPT-2: weights N(0, 0.02), the
residual projections scaled by 1/sqrt(2 x layers).

    >>> import torch
    >>> net = gpt((16,), 256, hidden=32, layers=2, heads=4)
    >>> tuple(net(torch.zeros(3, 16, dtype=torch.long)).shape)
    (3, 16, 256)
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from gossipgrad.choices import at_least, spell

#: Defaults for an option left at 0: width (``--hidden``), ``--layers``, ``--heads``,
#: ``--context`` (tokens per sample).
WIDTH, LAYERS, HEADS, CONTEXT = 128, 4, 4, 128


def check_shape(width: int, layers: int, heads: int, context: int) -> None:
    """Raise ValueError unless the shape can be built (0 takes the default)."""
    for flag, value in (("--hidden", width), ("--layers", layers), ("--heads", heads)):
        at_least(value, 0, flag)
    at_least(context, 0, "--context")
    w, h = width or WIDTH, heads or HEADS
    if w % h:
        raise ValueError(
            f"gpt's width {w} ({spell('--hidden')}) must be a multiple of its {h} heads "
            f"({spell('--heads')})"
        )


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """``vocab`` token ids in, their next-token logits out, over at most ``context``
    positions."""

    def __init__(self, vocab: int, context: int, width: int, layers: int, heads: int) -> None:
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith(("proj.weight", "out.weight")):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.context:
            raise ValueError(
                f"a sequence of {t} tokens is longer than gpt's context {self.context}"
            )
        x = self.tokens(idx) + self.positions(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def gpt(
    in_shape: tuple[int, ...], classes: int, hidden: int = 0, layers: int = 0, heads: int = 0
) -> GPT:
    """The registry's constructor: ``in_shape`` is ``(context,)``, ``classes`` the vocabulary
    (256 for bytes); ``hidden`` (width), ``layers`` and ``heads`` at 0 take the defaults."""
    (context,) = in_shape
    check_shape(hidden, layers, heads, context)
    return GPT(classes, context, hidden or WIDTH, layers or LAYERS, heads or HEADS)
