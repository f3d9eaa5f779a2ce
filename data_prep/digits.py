"""scikit-learn's handwritten digits: 1,797 real 8x8 images in 10 classes, shipped inside it.

The 17 grey levels (0..16) are scaled to 0..255, and the 8x8 images are upsampled with a bilinear
filter to the requested size (16 px keeps all of their information; the model's smallest size).
"""

from __future__ import annotations

import numpy as np
from PIL import Image


def load_digits_images(resolution: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Return (images uint8 (N, R, R, 1), labels int64 (N,), class names)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    raw = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    out = np.empty((raw.shape[0], resolution, resolution, 1), dtype=np.uint8)
    for i, img in enumerate(raw):
        big = Image.fromarray(img, mode="L").resize((resolution, resolution), Image.BILINEAR)
        out[i, :, :, 0] = np.asarray(big)
    names = [str(n) for n in bunch.target_names]
    return out, bunch.target.astype(np.int64), names
