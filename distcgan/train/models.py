"""The paper's DC-GAN generator and discriminator (Tables 1-2), and the DC-CGAN ones (Tables 3-4).

R = 16, 32 or 64 px. With `num_classes` K > 0 the networks are conditional: G's input is z
joined with a learned K-dimensional label embedding (100 + 10 = 110 inputs for 10 classes, as
in the paper), and D's input gets K one-hot label maps joined on the channel axis (a published
implementation joined them on the batch axis, which is a bug: labels and images never meet).
"""

from __future__ import annotations

import torch
from torch import nn

from distcgan.config import RESOLUTIONS


class Generator(nn.Module):
    """z (B, z_dim) -> image (B, C, R, R) in [-1, 1]."""

    def __init__(
        self, z_dim: int = 100, channels: int = 1, resolution: int = 32, num_classes: int = 0
    ) -> None:
        super().__init__()
        if resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {RESOLUTIONS}, got {resolution}")
        self.init_size = resolution // 4
        self.num_classes = num_classes
        self.label_emb = nn.Embedding(num_classes, num_classes) if num_classes else None
        self.l1 = nn.Linear(z_dim + num_classes, 128 * self.init_size**2)
        self.conv_blocks = nn.Sequential(
            nn.BatchNorm2d(128),  # (B, 128, R/4, R/4)
            nn.Upsample(scale_factor=2),  # (B, 128, R/2, R/2)
            nn.Conv2d(128, 128, 3, stride=1, padding=1),
            # eps 0.8 is the paper's (and its reference code's) value, not a typo for 1e-8.
            nn.BatchNorm2d(128, eps=0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Upsample(scale_factor=2),  # (B, 128, R, R)
            nn.Conv2d(128, 64, 3, stride=1, padding=1),  # (B, 64, R, R)
            nn.BatchNorm2d(64, eps=0.8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(64, channels, 3, stride=1, padding=1),  # (B, C, R, R)
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.label_emb is not None:
            z = torch.cat([z, self.label_emb(labels)], dim=1)  # (B, z_dim + K)
        out = self.l1(z).view(z.shape[0], 128, self.init_size, self.init_size)
        return self.conv_blocks(out)


def _d_block(c_in: int, c_out: int, bn: bool, dropout: float) -> list[nn.Module]:
    layers: list[nn.Module] = [
        nn.Conv2d(c_in, c_out, 3, stride=2, padding=1),
        nn.LeakyReLU(0.2, inplace=True),
        nn.Dropout(dropout),
    ]
    if bn:
        layers.append(nn.BatchNorm2d(c_out, eps=0.8))
    return layers


class Discriminator(nn.Module):
    """image (B, C, R, R) -> logit (B, 1); the sigmoid lives in the loss, for stability."""

    def __init__(
        self,
        channels: int = 1,
        resolution: int = 32,
        num_classes: int = 0,
        dropout: float = 0.25,
    ) -> None:
        super().__init__()
        if resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {RESOLUTIONS}, got {resolution}")
        self.num_classes = num_classes
        self.model = nn.Sequential(
            *_d_block(channels + num_classes, 16, False, dropout),  # (B, 16, R/2, R/2)
            *_d_block(16, 32, True, dropout),  # (B, 32, R/4, R/4)
            *_d_block(32, 64, True, dropout),  # (B, 64, R/8, R/8)
            *_d_block(64, 128, True, dropout),  # (B, 128, R/16, R/16)
        )
        ds_size = resolution // 16
        self.adv_layer = nn.Linear(128 * ds_size**2, 1)

    def forward(self, img: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if self.num_classes:
            # One-hot label maps on the channel axis: (B, C + K, R, R).
            maps = nn.functional.one_hot(labels, self.num_classes).to(img.dtype)
            maps = maps[:, :, None, None].expand(-1, -1, *img.shape[2:])
            img = torch.cat([img, maps], dim=1)
        out = self.model(img)
        return self.adv_layer(out.flatten(1))


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
