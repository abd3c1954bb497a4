"""``--pretrained``: torchvision's ImageNet weights for the model, or a clear error.

Rank 0 fetches them (``torch.hub``'s cache, ``$TORCH_HOME/hub/checkpoints``; the
optimizer's start-up broadcast gives every rank the same values); where they cannot be
fetched (no network, a proxy) the error says what to do instead of a urllib traceback.
"""

from __future__ import annotations

import torch

from gossipgrad.choices import spell


def load_pretrained_(model: torch.nn.Module, arch: str) -> None:
    """Load torchvision's default ImageNet weights of ``arch`` into ``model``, in place.
    RuntimeError naming the flag when they cannot be fetched or do not fit the model."""
    from torchvision.models import get_model_weights

    weights = get_model_weights(arch).DEFAULT
    try:
        state = weights.get_state_dict(progress=False)
    except Exception as exc:  # noqa: BLE001 - urllib, SSL, HTTP, disk: all "not fetched"
        raise RuntimeError(
            f"{spell('--pretrained', True)}: could not fetch {weights} from {weights.url} "
            f"({type(exc).__name__}: {exc}); put the file into "
            f"{torch.hub.get_dir()}/checkpoints on this host, or train without it"
        ) from None
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[-1].strip()
        raise RuntimeError(
            f"{spell('--pretrained', True)}: {weights} does not fit this {arch} ({first}); "
            "the weights are for 1000 ImageNet classes"
        ) from None
