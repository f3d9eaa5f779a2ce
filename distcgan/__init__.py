"""distcgan: per-class DC-GAN training over MPI ranks, one independent G/D pair per data class.

import distcgan
G = distcgan.load_generator("runs/demo-export")  # an export of a trained run (distcgan export)
images = G(torch.randn(8, G.config["z_dim"]), torch.full((8,), 3))  # uint8 (8, C, H, W)

The package's layers, lowest first. A module imports from its own layer and the ones below it,
never from one above, inside functions too (tests/test_architecture.py checks every import
against this list). A lower layer that needs something built above it declares what it needs as
a small protocol, and the layer above passes it in (train/task.py's Scorer, built by eval/).

    1. errors, progress: the one-line errors and the progress bar
    2. config, plan, env, options: the training config, the pure plans, versions, the options
    3. run: the run directory and its files, the exit codes (no torch)
    4. mpi, data, images, faults: ranks and groups, the data file, pictures, injected faults
    5. train: the pairs, the step and the loop, a rank's job
    6. eval, anova: scores, samples, the classifier; the data's analysis of variance
    7. compare, export, report, bench, bench_flags, bench_worker: what commands build on them
    8. cli, __main__, distcgan: the commands, and this package's load_generator
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["load_generator"]


def load_generator(path: Any, device: Any = "cpu") -> Any:
    """An export (distcgan export --run RUN --out DIR) as a module G(z, y) -> uint8 images; see
    distcgan/export/load.py. Imported on use: `import distcgan` stays light."""
    from distcgan.export.load import load_generator as load  # lazy: `import distcgan` stays light

    return load(path, device)
