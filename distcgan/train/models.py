"""The paper's DC-GAN generator and discriminator (Tables 1-2), and the DC-CGAN ones (Tables 3-4).

R = 16, 32 or 64 px. With `num_classes` K > 0 the networks are conditional: G's input is z
joined with a learned K-dimensional label embedding (100 + 10 = 110 inputs for 10 classes, as
in the paper), and D's input gets K one-hot label maps joined on the channel axis (a published
implementation joined them on the batch axis, which is a bug: labels and images never meet).

With `fuse` F > 1 one module is F independent unconditional networks of the same shapes
(horizontal fusion, as HFTA): convolutions with groups=F over F x C channels, BatchNorm over
F x C channels (per network, because the channels are), and the linear layers F at once
(`linear_over_maps`: grouped convolutions on a CPU, batched matmuls on a GPU). Network k's
images are channels [k*C, (k+1)*C) of one batch (its noise: columns [k*z_dim, (k+1)*z_dim) of
z), and every parameter reshaped to (F, *its shape alone) holds network k's at [k]:
train/fused.py relies on that.
"""

from __future__ import annotations

import torch
from torch import nn

from distcgan.config import BMM_DEVICES, RESOLUTIONS


class FusedLinear(nn.Module):
    """The parameters of F independent nn.Linear layers: weight (F, out, in) and bias (F, out)
    hold layer k at [k], laid out as nn.Linear's. `linear_over_maps` applies them."""

    def __init__(self, fuse: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fuse, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(fuse, out_features))
        for k in range(fuse):  # nn.Linear's own initialisation, layer by layer
            layer = nn.Linear(in_features, out_features)
            with torch.no_grad():
                self.weight[k].copy_(layer.weight)
                self.bias[k].copy_(layer.bias)


def linear_over_maps(layer: nn.Linear | FusedLinear, x: torch.Tensor, fuse: int) -> torch.Tensor:
    """A linear layer (nn.Linear, or FusedLinear for F networks) on each network's block of x,
    (B, F*C, h, w), read as one vector of C*h*w (flattened as .flatten(1) would): (B, F*out).

    F networks on a GPU: a batched matmul over the F axis (`linear_bmm`), measured 1.04x the
    step with grouped convolutions for 10 digits classes (float32, the matmuls at TF32) and
    1.18-1.20x at 32 and 64 px RGB in bf16 (one H100, 2026-11-27, README "Fused class
    pairs"); again 1.05x, 1.18x and 1.19x with the float32 matmuls at full precision, as
    training runs them (2026-11-28). Elsewhere, and for one network, the grouped convolution
    (`linear_conv`), which a CPU computes group by group with the ungrouped kernels: each
    network then rounds exactly as alone, where a batched matmul rounds differently with the
    number of networks (measured: 1 ulp in some outputs, enough for GAN training with Adam to
    drift apart within a few steps).
    """
    if fuse > 1 and x.device.type in BMM_DEVICES:
        return linear_bmm(layer, x, fuse)
    return linear_conv(layer, x, fuse)


def linear_conv(layer: nn.Linear | FusedLinear, x: torch.Tensor, fuse: int) -> torch.Tensor:
    """`linear_over_maps` as a convolution whose kernel covers the h x w maps (the same sum as
    the matmul), grouped over the F networks: (B, F*out)."""
    h, w = x.shape[2:]
    out_features = layer.weight.shape[-2]
    weight = layer.weight.reshape(fuse * out_features, -1, h, w)
    return nn.functional.conv2d(x, weight, layer.bias.reshape(-1), groups=fuse).flatten(1)


def linear_bmm(layer: nn.Linear | FusedLinear, x: torch.Tensor, fuse: int) -> torch.Tensor:
    """`linear_over_maps` as a batched matmul over the F axis: each network's block of x read
    as one vector of C*h*w, times its own weight; (B, F*out). One network (nn.Linear) is a
    plain linear layer."""
    if fuse == 1:
        return nn.functional.linear(x.flatten(1), layer.weight, layer.bias)
    b = x.shape[0]
    v = x.reshape(b, fuse, -1).transpose(0, 1)  # (F, B, C*h*w)
    out = torch.baddbmm(layer.bias[:, None, :], v, layer.weight.transpose(1, 2))  # (F, B, out)
    return out.transpose(0, 1).reshape(b, -1)


def _linear(fuse: int, in_features: int, out_features: int) -> nn.Linear | FusedLinear:
    if fuse == 1:
        return nn.Linear(in_features, out_features)
    return FusedLinear(fuse, in_features, out_features)


def _check(resolution: int, num_classes: int, fuse: int) -> None:
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {RESOLUTIONS}, got {resolution}")
    if fuse < 1 or (fuse > 1 and num_classes):
        raise ValueError(f"fuse must be >= 1, and 1 for a conditional network, got {fuse}")


class Generator(nn.Module):
    """z (B, z_dim) -> image (B, C, R, R) in [-1, 1]; fused: z (B, F*z_dim) -> (B, F*C, R, R)."""

    def __init__(
        self,
        z_dim: int = 100,
        channels: int = 1,
        resolution: int = 32,
        num_classes: int = 0,
        fuse: int = 1,
    ) -> None:
        super().__init__()
        _check(resolution, num_classes, fuse)
        self.init_size = resolution // 4
        self.num_classes, self.fuse = num_classes, fuse
        self.label_emb = nn.Embedding(num_classes, num_classes) if num_classes else None
        self.l1 = _linear(fuse, z_dim + num_classes, 128 * self.init_size**2)
        f = fuse  # F networks side by side: F times the channels, groups=F
        self.conv_blocks = nn.Sequential(
            nn.BatchNorm2d(f * 128),  # (B, 128, R/4, R/4)
            nn.Upsample(scale_factor=2),  # (B, 128, R/2, R/2)
            nn.Conv2d(f * 128, f * 128, 3, stride=1, padding=1, groups=f),
            # eps 0.8 is the paper's (and its reference code's) value, not a typo for 1e-8.
            nn.BatchNorm2d(f * 128, eps=0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2),  # (B, 128, R, R)
            nn.Conv2d(f * 128, f * 64, 3, stride=1, padding=1, groups=f),  # (B, 64, R, R)
            nn.BatchNorm2d(f * 64, eps=0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(f * 64, f * channels, 3, stride=1, padding=1, groups=f),  # (B, C, R, R)
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.label_emb is not None:
            z = torch.cat([z, self.label_emb(labels)], dim=1)  # (B, z_dim + K)
        s, b = self.init_size, z.shape[0]
        out = linear_over_maps(self.l1, z.view(b, -1, 1, 1), self.fuse)  # (B, F*128*s*s)
        return self.conv_blocks(out.view(b, self.fuse * 128, s, s))


def _d_block(
    c_in: int, c_out: int, bn: bool, dropout: float, fuse: int, eps: float
) -> list[nn.Module]:
    layers: list[nn.Module] = [
        nn.Conv2d(fuse * c_in, fuse * c_out, 3, stride=2, padding=1, groups=fuse),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Dropout(dropout),
    ]
    if bn:
        layers.append(nn.BatchNorm2d(fuse * c_out, eps=eps))
    return layers


class Discriminator(nn.Module):
    """image (B, C, R, R) -> logit (B, 1); the sigmoid lives in the loss, for stability.
    Fused: images (B, F*C, R, R) -> logits (F, B, 1)."""

    def __init__(
        self,
        channels: int = 1,
        resolution: int = 32,
        num_classes: int = 0,
        dropout: float = 0.25,
        fuse: int = 1,
        bn_eps: float = 0.8,
    ) -> None:
        super().__init__()
        _check(resolution, num_classes, fuse)
        self.num_classes, self.fuse = num_classes, fuse
        e = bn_eps  # the paper's 0.8 by default (--d-bn-eps)
        self.model = nn.Sequential(
            *_d_block(channels + num_classes, 16, False, dropout, fuse, e),  # (B, 16, R/2, R/2)
            *_d_block(16, 32, True, dropout, fuse, e),  # (B, 32, R/4, R/4)
            *_d_block(32, 64, True, dropout, fuse, e),  # (B, 64, R/8, R/8)
            *_d_block(64, 128, True, dropout, fuse, e),  # (B, 128, R/16, R/16)
        )
        ds_size = resolution // 16
        self.adv_layer = _linear(fuse, 128 * ds_size**2, 1)

    def forward(self, img: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.num_classes:
            # One-hot label maps on the channel axis: (B, C + K, R, R).
            assert labels is not None  # a conditional D is always given the labels (step.py)
            maps = nn.functional.one_hot(labels, self.num_classes).to(img.dtype)
            maps = maps[:, :, None, None].expand(-1, -1, *img.shape[2:])
            img = torch.cat([img, maps], dim=1)
        logits = linear_over_maps(self.adv_layer, self.model(img), self.fuse)  # (B, F)
        if self.fuse == 1:
            return logits  # (B, 1)
        # (F, B, 1), each class's logits contiguous as alone: the loss's element-wise kernels
        # then run over each class's row as over a class's own logits. On a transposed view they
        # ran one element at a time where alone they ran vectorised, and sigmoid's two forms
        # differ in the last bit (measured on an AVX-512 CPU: one logit's gradient in 32).
        return logits.t().contiguous().unsqueeze(-1)


def init_weights(module: nn.Module) -> None:
    """DC-GAN initialisation: conv weights N(0, 0.02); BatchNorm weights N(1, 0.02), biases 0.

    Conv biases and linear layers keep PyTorch's default, as in the paper's reference code. That
    matters with BatchNorm eps 0.8, which barely rescales small activations: with zero conv
    biases D's logits start with a spread of about 2e-4 and (measured on the digits preset) both
    losses stayed at log 2 for 600 steps.
    """
    if isinstance(module, nn.Conv2d):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)
