"""The one image step every converter shares: fit an image to R x R and return uint8 pixels.

Fitting is "shorter side to R, then centre crop", done in one call: the central square of the
source (side = its shorter side) is resampled to R x R. Shrinking uses PIL's BOX filter (each
output pixel is the mean of the source pixels it covers: an area filter, no aliasing); enlarging
(MNIST's 28 px to 32, the digits' 8 px) uses BILINEAR, because a box filter there only repeats
pixels. An image already R x R is left exactly as it is.

Image files are decoded with JPEG "draft" mode where it applies: libjpeg then scales by 1/2, 1/4
or 1/8 inside the DCT (block means, an area filter too) while keeping the shorter side >= 2R, and
BOX does the rest; on ImageNet's ~400 px photos that is several times faster than a full decode.
Any mode PIL reads (grayscale, CMYK, palette, 16-bit, RGBA; a PNG named .JPEG) is converted to RGB.
Leaves out: which files to read and what to do with unreadable ones (`folder.py`).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image


def fit_square(img: Image.Image, size: int) -> Image.Image:
    """Resample the central square of `img` to `size` x `size` (BOX when shrinking)."""
    w, h = img.size
    if (w, h) == (size, size):
        return img
    side = min(w, h)
    left, top = (w - side) / 2, (h - side) / 2
    filt = Image.Resampling.BOX if side > size else Image.Resampling.BILINEAR
    return img.resize((size, size), filt, box=(left, top, left + side, top + side))


def fit_array(images: np.ndarray, size: int) -> np.ndarray:
    """`fit_square` over a batch of uint8 (n, S, S, C) arrays (C = 1 or 3) -> (n, size, size, C)."""
    n, s, _, c = images.shape
    if s == size:
        return images
    out = np.empty((n, size, size, c), dtype=np.uint8)
    mode = "L" if c == 1 else "RGB"
    for i in range(n):
        img = Image.fromarray(images[i, :, :, 0] if c == 1 else images[i], mode=mode)
        out[i] = np.asarray(fit_square(img, size)).reshape(size, size, c)
    return out


def _draft_size(w: int, h: int, size: int) -> tuple[int, int]:
    # draft() keeps both sides >= the request: ask for the shorter side at 2R so that BOX still
    # averages at least 2 x 2 decoded pixels into each output pixel.
    scale = 2 * size / min(w, h)
    return max(1, int(w * scale + 0.999)), max(1, int(h * scale + 0.999))


def decode_file(path: str | Path, size: int) -> np.ndarray:
    """Read one image file as uint8 (size, size, 3). Raises whatever PIL raises on a bad file."""
    with warnings.catch_warnings():
        # Odd metadata (corrupt EXIF, palette transparency) is harmless for pixels.
        warnings.simplefilter("ignore")
        img: Image.Image  # the opened file, then what convert() makes of it
        with Image.open(path) as img:
            if img.format == "JPEG":
                img.draft("RGB", _draft_size(*img.size, size))
            if img.mode == "P" and "transparency" in img.info:
                img = img.convert("RGBA")
            rgb = img.convert("RGB") if img.mode != "RGB" else img
            return np.asarray(fit_square(rgb, size), dtype=np.uint8).copy()
