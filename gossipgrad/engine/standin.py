"""``--device standin:PROFILE``: the training run's side of the stand-in accelerator.

    handle = attach(cfg, model, source.in_shape)   # None unless --device standin:...
    sgd = handle.optimizer(sgd)                    # waits the profile's optimizer time
    ...
    summary.update(summary_fields(handle, summary))

The device itself is :mod:`gossipgrad.devices.standin`; here are the checks that tie it to
a training configuration (the profile is of ``--arch`` and of the data's sample shape;
sufficient factors, whose byte counts depend on activation rows, are turned off) and what
the summary says: that it was a stand-in run, the step time and samples per second both
dilated (as measured) and undilated (divided by ``--dilate``: the time of the cluster
stood in for), and no accuracy. With neither ``GOSSIPGRAD_THREADS`` nor ``OMP_NUM_THREADS``
set, torch gets one intra-op thread: the host computes nothing, and an idle pool's threads
spin (measured: 0.4 s of CPU per ResNet-50 step with 2 threads, 0.065 s with 1).
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from gossipgrad.devices import NOTE, Standin, StandinProfile
from gossipgrad.engine.config import TrainConfig
from gossipgrad.options import Device, SufficientFactors
from gossipgrad.settings import settings

log = logging.getLogger(__name__)

NO_ACCURACY = {
    "top1": None,
    "top5": None,
    "test_accuracy": None,
    "test_loss": None,
    "val_images": 0,
}
"""What an evaluation of a stand-in model reports: nothing (its outputs are zeros)."""


def attach(cfg: TrainConfig, model: torch.nn.Module, in_shape: tuple[int, ...]) -> Standin | None:
    """Patch ``model`` for ``--device standin:PROFILE``; None for any other device.

    Raises ``ValueError`` naming the profile when it is not of this model and input, or
    with ``--sufficient-factors on``."""
    if cfg.run.device is not Device.STANDIN:
        return None
    profile = StandinProfile.load(cfg.run.standin_profile or "")
    where = f"--device standin:{cfg.run.standin_profile}"
    if profile.arch != cfg.arch or (profile.hidden and profile.hidden != cfg.hidden):
        raise ValueError(
            f"{where} is a profile of {profile.arch}"
            f"{f' (hidden {profile.hidden})' if profile.hidden else ''}; this run's --arch is "
            f"{cfg.arch}: pass -a {profile.arch}, or profile {cfg.arch}"
        )
    if tuple(profile.input_shape) != tuple(in_shape):
        shape = "x".join(map(str, profile.input_shape))
        raise ValueError(
            f"{where} was taken on {shape} inputs, the data gives "
            f"{'x'.join(map(str, in_shape))} (--image-size, or another dataset?)"
        )
    if cfg.exchange.sufficient_factors is SufficientFactors.ON:
        raise ValueError(
            f"{where} cannot send sufficient factors: a stand-in's activations are one "
            "sample's, so their bytes would be wrong; use --sufficient-factors off"
        )
    handle = Standin(model, profile, cfg.run.dilate)
    env = settings()
    if not (env.threads or env.omp_threads):  # the host computes nothing: no spinning pool
        torch.set_num_threads(1)
    log.info("%s; device %s, dilate x%g", NOTE, profile.describe(), cfg.run.dilate)
    return handle


def summary_fields(handle: Standin, summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's stand-in record and its accuracy fields set to None.

    ``step_s`` is measured (dilated); ``step_s_undilated`` divides it by ``--dilate``;
    samples per second likewise the other way round."""
    k = handle.dilation.factor
    ips = summary.get("samples_per_s") or 0.0
    size, batch = summary.get("size", 1), summary.get("batch_size", handle.batch)
    step_s = batch * size / ips if ips else None
    record = {
        **handle.report(),
        "step_s": step_s,
        "step_s_undilated": step_s / k if step_s else None,
        "samples_per_s": ips,
        "samples_per_s_undilated": ips * k,
    }
    return {**NO_ACCURACY, "device": "standin", "standin": record}
