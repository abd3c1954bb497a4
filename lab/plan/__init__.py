"""PURE parts of the planner's validation: held-out prediction from a frozen calibration
(:mod:`lab.plan.heldout`), the scores of predictions against measurements
(:mod:`lab.plan.validate`) and synthetic profiles for projections (:mod:`lab.plan.synthetic`).
numpy + stdlib, like :mod:`gossipgrad.tools.plan`, which they build on."""
