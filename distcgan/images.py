"""Image conversions and PNG grids (written atomically)."""

from __future__ import annotations

import os

import numpy as np
import torch
from PIL import Image

from distcgan.run.atomic import atomic_path


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """Generator output (N, C, H, W) in [-1, 1] -> uint8 (N, H, W, C), rounding to nearest."""
    x = ((x.detach().float().cpu() + 1.0) * 127.5).round_().clamp_(0, 255).to(torch.uint8)
    return x.permute(0, 2, 3, 1).contiguous().numpy()


def to_float(images: np.ndarray, device: str | torch.device) -> torch.Tensor:
    """uint8 (N, H, W, C) -> float (N, C, H, W) in [-1, 1] on `device` (moved as uint8: 4x less)."""
    x = torch.from_numpy(images).to(device).permute(0, 3, 1, 2).float()
    return x.div_(127.5).sub_(1.0).contiguous()


def grid_canvas(grid: np.ndarray, pad: int = 1) -> np.ndarray:
    """A (rows, cols, H, W, C) uint8 array as one (rows*(H+pad)+pad, cols*(W+pad)+pad, C) image,
    `pad` px of grey between the images."""
    rows, cols, h, w, c = grid.shape
    canvas = np.full((rows * (h + pad) + pad, cols * (w + pad) + pad, c), 96, dtype=np.uint8)
    for i in range(rows):
        for j in range(cols):
            y, x = pad + i * (h + pad), pad + j * (w + pad)
            canvas[y : y + h, x : x + w] = grid[i, j]
    return canvas


def save_grid(path: str | os.PathLike[str], grid: np.ndarray, scale: int = 1, pad: int = 1) -> None:
    """Write a (rows, cols, H, W, C) uint8 array as one PNG, `pad` px of grey between images."""
    canvas = grid_canvas(grid, pad)
    c = canvas.shape[2]
    img = Image.fromarray(canvas[..., 0] if c == 1 else canvas, mode="L" if c == 1 else "RGB")
    if scale > 1:
        img = img.resize((img.width * scale, img.height * scale), Image.Resampling.NEAREST)
    with atomic_path(path) as tmp:
        img.save(tmp, format="PNG")


def grid_scale(resolution: int) -> int:
    """Nearest-neighbour upscaling that makes small images visible (16 px -> 4x)."""
    return max(1, 64 // resolution)
