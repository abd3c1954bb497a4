"""Tiny generated ImageFolders for tests: DIR/{train,val}/<class>/<i>.jpg, 32x32 pixels."""

from __future__ import annotations

from pathlib import Path

CLASSES = ("ant", "bee", "cat")


def make_image_folder(
    root: Path, per_class: int = 4, val_per_class: int = 2, size: int = 32
) -> Path:
    """Write noisy, class-tinted JPEGs (so crops and flips change pixels); returns ``root``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", val_per_class)):
        for c, name in enumerate(CLASSES):
            (root / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                pixels[..., c] = 255
                Image.fromarray(pixels).save(root / split / name / f"{i}.jpg")
    return root


def corrupt(path: Path) -> Path:
    """Overwrite ``path`` with bytes that are no image."""
    path.write_bytes(b"\xff\xd8\xff\xe0 this is not a JPEG")
    return path
