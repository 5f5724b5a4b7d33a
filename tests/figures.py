"""What a test can check of a written figure: a PNG of a plausible size with something drawn on it."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def assert_drawn(path: Path, min_pixels: tuple[int, int] = (200, 150), min_colors: int = 3) -> np.ndarray:
    """``path`` decodes as a PNG of at least ``min_pixels`` (width, height) holding at least
    ``min_colors`` distinct colours (a blank or one-colour image fails); returns its pixels."""
    from matplotlib import image

    pixels = image.imread(str(path), format="png")
    height, width = pixels.shape[:2]
    assert width >= min_pixels[0] and height >= min_pixels[1], f"{path}: {width}x{height} pixels"
    colors = np.unique(pixels.reshape(-1, pixels.shape[-1]) if pixels.ndim == 3 else pixels.ravel(), axis=0)
    assert len(colors) >= min_colors, f"{path}: {len(colors)} colour(s): nothing drawn"
    return pixels
