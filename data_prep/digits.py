"""scikit-learn's handwritten digits: 1,797 real 8x8 images in 10 classes, shipped inside it.

The 17 grey levels (0..16) are scaled to 0..255; the shared resize step (`resize.py`) then
enlarges the 8x8 images with a bilinear filter (16 px keeps all of their information; the
model's smallest size). There is no train/test split. Leaves out: nothing else; it is tiny.
"""

from __future__ import annotations

import numpy as np

from data_prep.rows import RowSource


def open_digits() -> RowSource:
    """The digits as rows at their native 8 px, labels 0..9, one chunk."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    raw = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    return RowSource(
        names=tuple(str(n) for n in bunch.target_names),
        labels=bunch.target.astype(np.int64),
        size=8,
        channels=1,
        read=lambda: iter([(0, raw[:, :, :, None])]),
        where="scikit-learn's digits",
        source="sklearn-digits",
    )
