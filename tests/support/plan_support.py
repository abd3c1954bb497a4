"""A small profile shared by the planner's tests (tests/unit/test_plan_calibrate.py and the
lab's held-out scoring): two 1 MB buckets, 32 ms of compute."""

from gossipgrad.tools.plan import Bucket, Profile

PROFILE = Profile(
    "m",
    8,
    "cpu",
    forward_s=0.010,
    backward_s=0.020,
    optimizer_s=0.002,
    param_bytes=2_000_000,
    buckets=(Bucket(0, 1_000_000, 0.005), Bucket(1, 1_000_000, 0.020)),
)
