"""What a simulated run reports: one JSON object per step, evaluations, a summary.

Every step: ``step`` (steps done), ``epoch``, ``loss`` (mean over the ranks that computed;
``loss_min``, ``loss_max``), ``distance`` (the consensus distance, mean over ranks of
``||x_i - x̄||² / ||x̄||²``), ``time_s`` (the simulated wall clock when the slowest rank
finished the step), ``lr`` and ``syncs`` (global averages so far). At evaluations (every
``eval_every`` steps, default once an epoch, and at the end) also ``accuracy`` and
``test_loss`` of the consensus model (the mean of the ranks' parameters: what a final
merge gives; measured, nothing is averaged in the run) and ``rank_accuracy_mean``,
``_min``, ``_max`` over ``rank_eval`` ranks' own models. The first line is the job
(``{"event": "job", ...}``), the last the summary (``{"event": "summary", ...}``).

The lines are also a metrics file of ``gossipgrad train``'s kind: an evaluation carries
``test_accuracy`` and ``strategy`` (the job's ``label``), the summary ``strategy``, ``size``,
``steps`` and the final ``test_accuracy``, so ``gossipgrad plan --metrics`` reads them (time
to accuracy from the simulator's steps: docs/scale.md).
"""

from __future__ import annotations

import json
import math
import time
from typing import IO, Any

import numpy as np
import torch

from gossipgrad.tools.simulate.clock import Timeline
from gossipgrad.tools.simulate.job import Job
from gossipgrad.tools.simulate.runtime import Progress
from gossipgrad.tools.simulate.stack import accuracy, rank_accuracies


class Recorder:
    """Collects a run's records (on one rank: rank 0 under a launcher).

    Args:
        job: the job; timeline: its clock.
        template: a model of the job's structure (evaluations call it functionally).
        out: a text stream for JSON lines (None: keep them only).
        progress: a progress bar on stderr.
    """

    def __init__(
        self,
        job: Job,
        timeline: Timeline,
        template: torch.nn.Module,
        out: IO[str] | None = None,
        progress: bool = False,
    ) -> None:
        self.job, self.timeline, self.template, self.out = job, timeline, template, out
        self.records: list[dict[str, Any]] = []
        self.losses = np.full((job.steps, job.size), np.nan)
        self.evals = job.eval_steps()
        self.bar = Progress(job.steps, 0, progress, desc=f"simulate {job.size} ranks")
        self.started = time.perf_counter()
        self.names = [n for n, p in template.named_parameters()]
        self.frozen = {n: p.detach() for n, p in template.named_parameters() if not p.requires_grad}
        self.label = job.sim.label or job.exchange.strategy
        self._write({"event": "job", **job.describe()})

    def _write(self, record: dict[str, Any]) -> None:
        if self.out is not None:
            self.out.write(json.dumps(_clean(record), allow_nan=False, default=_plain) + "\n")
            self.out.flush()

    def wants_params(self, step: int) -> bool:
        """Whether step ``step`` (counted from 1) is evaluated."""
        return step in self.evals

    def step(
        self,
        t: int,
        losses: np.ndarray,
        lr: float,
        distance: float,
        syncs: int,
        stacked: dict[str, torch.Tensor] | None = None,
    ) -> dict[str, Any]:
        """Record step ``t`` (counted from 0); ``stacked``: every rank's parameters by name
        (``[size, *shape]``) at an evaluated step."""
        self.losses[t] = losses
        computed = losses[~np.isnan(losses)]
        rec: dict[str, Any] = {
            "step": t + 1,
            "epoch": round((t + 1) / self.job.steps_per_epoch, 4),
            "loss": float(computed.mean()) if len(computed) else None,
            "loss_min": float(computed.min()) if len(computed) else None,
            "loss_max": float(computed.max()) if len(computed) else None,
            "distance": distance,
            "time_s": self.timeline.wall(t),
            "lr": lr,
            "syncs": syncs,
        }
        if stacked is not None:
            rec.update(self.evaluate(stacked))
            if "accuracy" in rec:
                rec.update(test_accuracy=rec["accuracy"], strategy=self.label)
        self.records.append(rec)
        self._write(rec)
        post = {"loss": f"{rec['loss']:.3f}"} if rec["loss"] is not None else {}
        if "accuracy" in rec:
            post["acc"] = f"{rec['accuracy']:.3f}"
        self.bar.update(1, **post)
        return rec

    def evaluate(self, stacked: dict[str, torch.Tensor]) -> dict[str, Any]:
        """Accuracy of the consensus model and of ``rank_eval`` ranks' own models."""
        task = self.job.task
        if task.test_x is None:
            return {}
        mean = {n: v.double().mean(0).float() for n, v in stacked.items()}
        acc, loss = accuracy(
            self.template, {**mean, **self.frozen}, task.test_x, task.test_y, self.job.loss_fn
        )
        size = next(iter(stacked.values())).shape[0]
        picks = np.unique(np.linspace(0, size - 1, min(size, self.job.sim.rank_eval)).round())
        rows = torch.from_numpy(picks.astype(np.int64))
        some = {n: v.index_select(0, rows) for n, v in stacked.items()}
        ranks = rank_accuracies(self.template, some, self.frozen, task.test_x, task.test_y)
        return {
            "accuracy": acc,
            "test_loss": loss,
            "rank_accuracy_mean": float(np.mean(ranks)),
            "rank_accuracy_min": float(np.min(ranks)),
            "rank_accuracy_max": float(np.max(ranks)),
        }

    def finish(self, final: dict[str, Any]) -> dict[str, Any]:
        """The summary: the final consensus accuracy (after the final merge) and the
        figures of the run; written last."""
        last = self.records[-1] if self.records else {}
        summary = {
            "steps": self.job.steps,
            "final_loss": last.get("loss"),
            "final_distance": last.get("distance"),
            "simulated_s": self.timeline.wall(self.job.steps - 1) if self.job.steps else 0.0,
            "mean_step_s": self.timeline.mean_step_s(),
            "skipped_steps": int(self.timeline.skipped.sum())
            if self.timeline.skipped is not None
            else 0,
            "wall_s": time.perf_counter() - self.started,
            **final,
        }
        planner = {"strategy": self.label, "size": self.job.size}
        if "final_accuracy" in final:
            planner["test_accuracy"] = final["final_accuracy"]
        self._write({"event": "summary", **planner, **summary})
        self.bar.close()
        return summary


def steps_to(records: list[dict[str, Any]], target: float, key: str = "accuracy") -> int | None:
    """The first evaluated step whose ``key`` reached ``target`` (None: never)."""
    for r in records:
        value = r.get(key)
        if value is not None and value >= target:
            return int(r["step"])
    return None


def _clean(value: Any) -> Any:
    """``value`` with every non-finite float as None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, np.integer | np.floating):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
