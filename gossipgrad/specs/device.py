"""What a device besides cpu and cuda says about itself (``DEVICES.register(name, spec)``).
PURE."""

from __future__ import annotations

from typing import Any, ClassVar


class DeviceSpec:
    """A device that ``--device NAME[:ARG]`` names besides auto, cpu and cuda: one a plugin
    registers in :data:`DEVICES` (the stand-in accelerator of ``gossipgrad.tools.devices``).

    Class attributes:
        name: the ``--device`` value before the colon.
        summary: one line for ``--help``.
        torch_device: where the model's tensors live (``"cpu"``).
        real_activations: the model computes real activations (sufficient factors need
            them: ``auto`` sends none without, ``on`` is refused).
        measures: losses and accuracy mean something (False: no evaluation, none logged).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    torch_device: ClassVar[str] = "cpu"
    real_activations: ClassVar[bool] = True
    measures: ClassVar[bool] = True

    def check(self, arg: str | None) -> None:
        """ValueError (one line) when ``arg`` cannot be this device's argument."""

    def attach(self, arg: str | None, cfg: Any, model: Any, in_shape: tuple[int, ...]) -> Any:
        """Prepare ``model`` for this device (collective: no); the handle has
        ``optimizer(opt)`` (wraps the local optimizer) and ``summary_fields(summary)``
        (what the run's summary adds)."""
        raise NotImplementedError(f"device {self.name!r} does not say how to attach itself")
