"""distcgan: per-class DC-GAN training over MPI ranks, one independent G/D pair per data class.

import distcgan
G = distcgan.load_generator("runs/demo-export")  # an export of a trained run (distcgan export)
images = G(torch.randn(8, G.config["z_dim"]), torch.full((8,), 3))  # uint8 (8, C, H, W)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_generator"]


def load_generator(path: Any, device: Any = "cpu") -> Any:
    """An export (distcgan export --run RUN --out DIR) as a module G(z, y) -> uint8 images; see
    distcgan/export/load.py. Imported on use: `import distcgan` stays light."""
    from distcgan.export.load import load_generator as load

    return load(path, device)
