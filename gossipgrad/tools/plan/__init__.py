"""Performance model and planner: predicts step time from a profile and a network fit, and
recommends a configuration per size. Pure (numpy + stdlib); never trains, never imports MPI
or torch. See docs/planner.md.

    >>> from gossipgrad.tools.plan import CommModel, Profile, plan, recommend, render_markdown
"""

from __future__ import annotations

from gossipgrad.tools.plan.convergence import (
    ConvergenceReport,
    ConvergenceRow,
    read_metrics,
    render_convergence,
    steps_to_target,
)
from gossipgrad.tools.plan.fit import fit_link
from gossipgrad.tools.plan.formats import AllreduceFit, Bucket, LinkFit, NetworkFit, Profile
from gossipgrad.tools.plan.host import HostShare, fit_handoff, fit_overlap, fit_stale
from gossipgrad.tools.plan.memory import MemoryEstimate, estimate_memory
from gossipgrad.tools.plan.model import (
    MIB,
    CommModel,
    StepTime,
    allreduce_factors,
    bytes_sent,
    comm_chain,
    efficiency,
    on_the_wire,
    parse_strategy,
    rebucket,
    samples_per_s,
    step_time,
)
from gossipgrad.tools.plan.planner import (
    DEFAULT_BUCKET_MB,
    DISCLAIMER,
    PlanRow,
    best_by,
    plan,
    plot_png,
    recommend,
    render_markdown,
)
from gossipgrad.tools.plan.report import plan_report

__all__ = [
    "DEFAULT_BUCKET_MB",
    "DISCLAIMER",
    "MIB",
    "AllreduceFit",
    "Bucket",
    "CommModel",
    "ConvergenceReport",
    "ConvergenceRow",
    "HostShare",
    "LinkFit",
    "MemoryEstimate",
    "NetworkFit",
    "PlanRow",
    "Profile",
    "StepTime",
    "allreduce_factors",
    "best_by",
    "bytes_sent",
    "comm_chain",
    "efficiency",
    "estimate_memory",
    "fit_handoff",
    "fit_overlap",
    "fit_link",
    "fit_stale",
    "on_the_wire",
    "parse_strategy",
    "plan",
    "plan_report",
    "plot_png",
    "read_metrics",
    "rebucket",
    "recommend",
    "render_convergence",
    "render_markdown",
    "samples_per_s",
    "step_time",
    "steps_to_target",
]
