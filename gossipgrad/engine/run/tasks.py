"""What a run measures, by its data's task: a classifier's accuracy, a language model's
loss per token and perplexity. The loop, the evaluation and the summary ask the task; none
of them looks at the model's name.

    task = task_of(source)              # "lm" sources: LanguageModel, else Classification
    window = task.train_fields(loss_sum, hits, targets)
    task.eval_fields(sums)              # after the ranks' eval_sums are added up

Counts, never rates, are added over batches and ranks (``eval_sums`` of every rank are
allreduced), so uneven shares weigh correctly. Loss is the mean cross-entropy per target:
per image for a classifier, per token for a language model, whose perplexity is
``exp(loss)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from gossipgrad.models import logits


def perplexity(loss: float | None) -> float | None:
    """``exp(loss)``: the mean loss per token in nats as a perplexity (inf past the float
    range; NaN stays NaN, None stays None).

    >>> perplexity(0.0), round(perplexity(math.log(256)), 6), perplexity(1e4)
    (1.0, 256.0, inf)
    """
    if loss is None:
        return None
    return math.inf if loss > 709.0 else math.exp(loss)


class Classification:
    """Top-1/top-5 accuracy and cross-entropy per sample."""

    name = "classification"
    unit = "images"
    eval_width = 4  # numbers eval_sums gives
    per_sample = 1  # units (images) in one sample

    def hits(self, output: Any, y: torch.Tensor) -> float:
        """Correct top-1 predictions of a training batch."""
        return float((logits(output).argmax(1) == y).sum())

    def train_fields(self, loss_sum: float, hits: float, n: int) -> dict[str, Any]:
        return {"loss": loss_sum / max(1, n), "train_accuracy": hits / max(1, n)}

    def rate_fields(self, samples_per_s: float, size: int) -> dict[str, float]:
        return {}

    def postfix(self, rec: dict[str, Any]) -> dict[str, str]:
        acc = rec.get("train_accuracy")
        return {"acc": "-" if acc is None else f"{acc:.3f}", "img_s": f"{rec['samples_per_s']:.0f}"}

    def eval_sums(self, output: torch.Tensor, y: torch.Tensor) -> list[float]:
        """top-1 correct, top-5 correct, loss sum, count."""
        out = logits(output)
        top = out.topk(min(5, out.shape[1]), dim=1).indices == y[:, None]
        loss = torch.nn.functional.cross_entropy(out, y, reduction="sum")
        return [float(top[:, 0].sum()), float(top.any(dim=1).sum()), float(loss), len(y)]

    def eval_fields(self, sums: np.ndarray) -> dict[str, Any]:
        """``test_accuracy`` repeats ``top1`` for the planner's convergence records. With
        fewer than five classes, top-5 is top-``classes`` (always 1.0)."""
        top1, top5, loss, count = (float(v) for v in sums)
        n = max(1.0, count)
        return {
            "top1": top1 / n,
            "top5": top5 / n,
            "test_accuracy": top1 / n,
            "test_loss": loss / n,
            "val_images": int(count),
        }

    def unmeasured(self) -> dict[str, Any]:
        """What an evaluation on a device that measures nothing reports."""
        return {
            "top1": None,
            "top5": None,
            "test_accuracy": None,
            "test_loss": None,
            "val_images": 0,
        }

    def describe(self, rec: dict[str, Any]) -> str:
        return (
            f"top1 {100 * rec['top1']:.2f}% top5 {100 * rec['top5']:.2f}% "
            f"loss {rec['test_loss']:.4f} on {rec['val_images']} val images"
        )

    def summary_fields(self, last: dict[str, Any], samples_per_s: float, size: int) -> dict:
        return {k: last.get(k) for k in ("top1", "top5", "test_accuracy", "test_loss")}


class LanguageModel:
    """Next-token cross-entropy per token and its perplexity; tokens per second.

    ``tokens`` is the number of targets in one sample (its context)."""

    name = "language model"
    unit = "tokens"
    eval_width = 2

    def __init__(self, tokens: int) -> None:
        self.per_sample = tokens  # targets (tokens) in one sample

    def hits(self, output: Any, y: torch.Tensor) -> float:
        return 0.0  # accuracy is not the measure of a language model

    def train_fields(self, loss_sum: float, hits: float, n: int) -> dict[str, Any]:
        loss = loss_sum / max(1, n)
        return {"loss": loss, "train_perplexity": perplexity(loss)}

    def rate_fields(self, samples_per_s: float, size: int) -> dict[str, float]:
        tokens = samples_per_s * self.per_sample
        return {"tokens_per_s": tokens, "tokens_per_s_per_rank": tokens / max(1, size)}

    def postfix(self, rec: dict[str, Any]) -> dict[str, str]:
        ppl = rec.get("train_perplexity")
        return {"ppl": "-" if ppl is None else f"{ppl:.2f}", "tok_s": f"{rec['tokens_per_s']:.0f}"}

    def eval_sums(self, output: torch.Tensor, y: torch.Tensor) -> list[float]:
        """loss sum, tokens."""
        out = logits(output)
        loss = torch.nn.functional.cross_entropy(out.flatten(0, -2), y.flatten(), reduction="sum")
        return [float(loss), y.numel()]

    def eval_fields(self, sums: np.ndarray) -> dict[str, Any]:
        loss, count = (float(v) for v in sums)
        mean = loss / max(1.0, count)
        return {"test_loss": mean, "test_perplexity": perplexity(mean), "val_tokens": int(count)}

    def unmeasured(self) -> dict[str, Any]:
        return {"test_loss": None, "test_perplexity": None, "val_tokens": 0}

    def describe(self, rec: dict[str, Any]) -> str:
        return (
            f"loss {rec['test_loss']:.4f} perplexity {rec['test_perplexity']:.3f} "
            f"on {rec['val_tokens']} val tokens"
        )

    def summary_fields(self, last: dict[str, Any], samples_per_s: float, size: int) -> dict:
        return {
            "test_loss": last.get("test_loss"),
            "test_perplexity": last.get("test_perplexity"),
            **self.rate_fields(samples_per_s, size),
        }


Task = Classification | LanguageModel


def task_of(source: Any) -> Task:
    """The task of a data source (``gossipgrad.data.sources.DataSource``): its ``task``
    attribute, ``"lm"`` for token sequences of ``in_shape[0]`` tokens; classification
    when it has none."""
    if getattr(source, "task", "classify") == "lm":
        return LanguageModel(source.in_shape[0])
    return Classification()
