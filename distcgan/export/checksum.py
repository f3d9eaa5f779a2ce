"""The checksums an export keeps in its model.safetensors metadata, so that a byte flipped
anywhere in the weights or in config.json is noticed when it is loaded (neither safetensors nor
JSON has a checksum of its own: a flipped bit in a weight changes the images without a word, one
in config.json's seed or class names changes what `generate` writes).

  config_sha256   SHA-256 of config.json's bytes
  weights_sha256  SHA-256 over the tensors in name order: each name, dtype, shape and bytes
                  (so a damaged safetensors header that still parses, naming another shape or
                  offset, fails it too)
The metadata itself sits in the safetensors header: damage there fails to parse or fails a sum.
An export written before these sums has none and is loaded unchecked. generator.pt2 and the
model card are not covered (distcgan reads neither). Leaves out: writing and loading the files
(writer.py, load.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch

# What an export's config.json and metadata say it is (load.py refuses anything else).
FORMAT = "distcgan-generator"
FORMAT_VERSION = 1
CONFIG_KEY, WEIGHTS_KEY = "config_sha256", "weights_sha256"


def weights_sha256(weights: Mapping[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].detach().cpu().contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def sums(config_bytes: bytes, weights: Mapping[str, torch.Tensor]) -> dict[str, str]:
    """The metadata entries of an export whose config.json is `config_bytes`."""
    return {
        CONFIG_KEY: hashlib.sha256(config_bytes).hexdigest(),
        WEIGHTS_KEY: weights_sha256(weights),
    }
