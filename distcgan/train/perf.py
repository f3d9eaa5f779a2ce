"""Process-wide performance settings, applied once at the start of a training process, and the
device sync that honest timing needs."""

from __future__ import annotations

import ctypes
from typing import Any

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
# The mmap threshold we ask for, then the largest that older glibc takes: up to 2.34 mallopt
# refuses (returns 0) anything above HEAP_MAX_SIZE/2 = 32 MiB on 64-bit, which is what RHEL 8
# (2.28) and SLES 15 (2.31) ship; 2.36 here takes 1 GiB.
MMAP_THRESHOLDS = (1 << 30, 32 << 20)
TRIM_THRESHOLD = 1 << 30


def tune_malloc(libc: Any = None) -> dict[str, int | None]:
    """Raise glibc's mmap and trim thresholds at run time (mallopt); returns what was applied,
    in bytes, None where nothing was (not glibc, or every value refused).

    By default glibc serves buffers above 128 KiB-32 MiB with mmap and unmaps them on free, so
    every step faults in its activations again; keeping them in the heap was measured at about
    1.1-1.2x per step on the CPU. Each threshold is set on its own: a refused mmap threshold
    must not leave the trim threshold at its default. The run records the result (env.json).
    """
    if libc is None:
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            return {"mmap_threshold": None, "trim_threshold": None}
    mmap = next((v for v in MMAP_THRESHOLDS if libc.mallopt(M_MMAP_THRESHOLD, v)), None)
    trim = TRIM_THRESHOLD if libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) else None
    return {"mmap_threshold": mmap, "trim_threshold": trim}


def sync(*devices: str) -> None:
    """Wait for queued GPU work so that the clock measures it (a no-op on the CPU)."""
    for dev in set(devices):
        if dev.startswith("cuda"):
            torch.cuda.synchronize(dev)
