"""A trained run as one conditional generator G(z, y) -> uint8 images (N, C, H, W).

Per-class training leaves K generators of one architecture. `ClassConditional` stacks their
weights and BatchNorm statistics by class ((K, ...) each) and computes every sample with its own
class's: a linear layer is a batched matmul of per-sample weights, a convolution of the batch
with per-sample weights is one grouped convolution with a group per sample, and BatchNorm (eval
mode) uses each sample's class statistics. Any mix of classes shares one batch, with no Python
loop over them, so `torch.export` captures it with a dynamic batch size. The layers are read off
models.Generator in order, so the export follows the architecture.

A cgan run is one conditional G already (`LabelledG`), a gan run one G without labels
(`UnlabelledG`). All three map G's output in [-1, 1] to uint8 as `distcgan sample` does
(images.to_uint8): x -> round((x + 1) * 127.5), clamped to [0, 255].
Leaves out: reading a run and writing the export (writer.py), loading it (load.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from distcgan.train.models import Generator


def to_uint8_nchw(x: torch.Tensor) -> torch.Tensor:
    """G's output (N, C, H, W) in [-1, 1] -> uint8 (N, C, H, W), as images.to_uint8 rounds."""
    return ((x.float() + 1.0) * 127.5).round().clamp(0, 255).to(torch.uint8)


def _key(name: str) -> str:
    """A state-dict key as a buffer name ("l1.weight" -> "l1__weight")."""
    return name.replace(".", "__")


class ClassConditional(nn.Module):
    """K unconditional generators (`states`, one state dict per class, in `class_ids` order) as
    G(z: float32 (N, z_dim), y: int64 (N,) class ids) -> uint8 (N, C, H, W). A y that is not
    one of `class_ids` is an error in eager mode (an index out of range); check it first."""

    def __init__(
        self, arch: Generator, class_ids: list[int], states: list[dict[str, torch.Tensor]]
    ) -> None:
        super().__init__()
        # The layer sequence and settings (stride, padding, eps), kept unregistered: their own
        # weights are never used, and the stacked ones below are the module's only state.
        self.layers = tuple((f"conv_blocks.{i}", m) for i, m in enumerate(arch.conv_blocks))
        self.init_size = arch.init_size
        self.class_ids = list(class_ids)
        rows = torch.full((max(class_ids) + 1,), len(class_ids), dtype=torch.long)
        rows[torch.tensor(class_ids)] = torch.arange(len(class_ids))
        self.register_buffer("row_of_class", rows)  # class id -> row (K: not exported)
        for name in arch.state_dict():
            if name.endswith("num_batches_tracked"):
                continue
            self.register_buffer(_key(name), torch.stack([s[name].float() for s in states]))

    def stacked(self, name: str) -> torch.Tensor:
        """Every class's tensor `name` of models.Generator's state dict, (K, ...)."""
        return self.get_buffer(_key(name))

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return to_uint8_nchw(self.synthesize(z, y))

    def synthesize(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """G's own output, floats in [-1, 1] (N, C, H, W)."""
        rows = self.get_buffer("row_of_class")[y]
        n, s = z.shape[0], self.init_size
        w, b = self.stacked("l1.weight")[rows], self.stacked("l1.bias")[rows]
        x = torch.bmm(w, z[:, :, None]).squeeze(-1) + b  # (N, 128*s*s)
        x = x.view(n, 128, s, s)
        for name, layer in self.layers:
            x = self._layer(name, layer, x, rows)
        return x

    def _layer(
        self, name: str, layer: nn.Module, x: torch.Tensor, rows: torch.Tensor
    ) -> torch.Tensor:
        """One layer of G's conv_blocks with each sample's class parameters."""
        n = x.shape[0]
        if isinstance(layer, nn.Conv2d):
            weight = self.stacked(f"{name}.weight")[rows]  # (N, out, in, kh, kw)
            bias = self.stacked(f"{name}.bias")[rows]  # (N, out)
            out = F.conv2d(
                x.reshape(1, -1, *x.shape[2:]),  # (1, N*in, H, W): a group per sample
                weight.reshape(-1, *weight.shape[2:]),
                bias.reshape(-1),
                stride=layer.stride,
                padding=layer.padding,
                groups=n,
            )
            return out.view(n, -1, *out.shape[2:])
        if isinstance(layer, nn.BatchNorm2d):  # eval mode: each sample's class statistics
            mean = self.stacked(f"{name}.running_mean")[rows][:, :, None, None]
            var = self.stacked(f"{name}.running_var")[rows][:, :, None, None]
            gamma = self.stacked(f"{name}.weight")[rows][:, :, None, None]
            beta = self.stacked(f"{name}.bias")[rows][:, :, None, None]
            return (x - mean) / torch.sqrt(var + layer.eps) * gamma + beta
        return layer(x)  # Upsample, LeakyReLU, Tanh: no parameters


class LabelledG(nn.Module):
    """A cgan run's one conditional G as G(z, y) -> uint8 (N, C, H, W)."""

    def __init__(self, G: Generator) -> None:
        super().__init__()
        self.G = G.eval()

    def forward(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return to_uint8_nchw(self.G(z, y))

    def synthesize(self, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.G(z, y)


class UnlabelledG(nn.Module):
    """A gan run's one G, which takes no label: G(z) -> uint8 (N, C, H, W)."""

    def __init__(self, G: Generator) -> None:
        super().__init__()
        self.G = G.eval()

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return to_uint8_nchw(self.G(z))

    def synthesize(self, z: torch.Tensor) -> torch.Tensor:
        return self.G(z)
