"""``--device standin:PROFILE``: the stand-in accelerator as a registered device
(:class:`gossipgrad.specs.DeviceSpec`), the training run's side of it.

The device itself is :mod:`gossipgrad.tools.devices.standin`; here are the checks that tie
it to a training configuration (the profile is of ``--arch`` and of the data's sample shape;
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

from gossipgrad.engine.run.loop import NO_ACCURACY
from gossipgrad.options import SufficientFactors
from gossipgrad.settings import settings
from gossipgrad.specs import DeviceSpec

log = logging.getLogger(__name__)


class StandinDevice(DeviceSpec):
    """``--device standin:PROFILE`` (a shipped profile's name or a JSON file)."""

    name = "standin"
    summary = "a stand-in accelerator: each layer waits its profiled time instead of computing"
    real_activations = False  # one sample's activations: no sufficient factors
    measures = False  # its outputs are zeros: no loss, no accuracy

    def check(self, arg: str | None) -> None:
        if not arg:
            raise ValueError(
                "--device standin needs a profile: --device standin:PROFILE (a shipped name "
                "such as resnet50, or a JSON file)"
            )

    def attach(self, arg: str | None, cfg: Any, model: torch.nn.Module, in_shape: Any) -> Any:
        return attach(cfg, model, in_shape, arg or "")


class StandinRun:
    """The handle a training run holds: the patched model's :class:`Standin`."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def optimizer(self, opt: torch.optim.Optimizer) -> Any:
        """``opt`` wrapped to wait the profile's optimizer time (it updates nothing)."""
        return self.handle.optimizer(opt)

    def summary_fields(self, summary: dict[str, Any]) -> dict[str, Any]:
        return summary_fields(self.handle, summary)


def attach(cfg: Any, model: torch.nn.Module, in_shape: tuple[int, ...], name: str) -> StandinRun:
    """Patch ``model`` for ``--device standin:NAME``.

    Raises ``ValueError`` naming the profile when it is not of this model and input, or
    with ``--sufficient-factors on``."""
    from gossipgrad.tools.devices.profile import StandinProfile
    from gossipgrad.tools.devices.standin import NOTE, Standin

    profile = StandinProfile.load(name)
    where = f"--device standin:{name}"
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
    return StandinRun(handle)


def summary_fields(handle: Any, summary: dict[str, Any]) -> dict[str, Any]:
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
