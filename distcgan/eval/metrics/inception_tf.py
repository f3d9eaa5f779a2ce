"""The Inception-v3 of TensorFlow's 2015 graph (inception-2015-12-05), as the original IS and FID
code ran it, built on torchvision's Inception3 so that the state-dict keys are torchvision's.

It differs from torchvision's Inception-v3 in four ways, each reproduced here:
- 1008 outputs (the graph's softmax layer), not 1000;
- the average pools inside the Mixed_5*, Mixed_6b-e and Mixed_7b blocks leave the zero padding out
  of the average (TensorFlow's 'SAME' average pooling; PyTorch's count_include_pad=False);
- the pool branch of the last block (Mixed_7c) takes a max pool, not an average pool;
- the input: images in [0, 255] resized to 299 x 299 by TensorFlow 1.x's bilinear resize
  (align_corners=False, no half-pixel centres), then mapped by (x - 128) / 128 (the graph's Sub
  and Mul nodes). PyTorch's bilinear interpolation uses half-pixel centres and differs.
The original IS code also takes its logits without the softmax layer's bias (pool_3 times the
weight matrix); `InceptionV3TF.forward` returns those unbiased logits.
The weights are the ported file `pt_inception-2015-12-05-6726825d.pth` (pytorch-fid's release;
torch-fidelity's `weights-inception-2015-12-05-6726825d.pth` has the same keys). Leaves out:
loading that file and checking it (networks.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.inception import Inception3, InceptionA, InceptionC, InceptionE

NUM_OUTPUTS = 1008
INPUT_SIZE = 299


class _InceptionA(InceptionA):
    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b5 = self.branch5x5_2(self.branch5x5_1(x))
        b3 = self.branch3x3dbl_3(self.branch3x3dbl_2(self.branch3x3dbl_1(x)))
        pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)
        return [b1, b5, b3, self.branch_pool(pool)]


class _InceptionC(InceptionC):
    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b7 = self.branch7x7_3(self.branch7x7_2(self.branch7x7_1(x)))
        b7d = self.branch7x7dbl_1(x)
        for layer in (self.branch7x7dbl_2, self.branch7x7dbl_3, self.branch7x7dbl_4):
            b7d = layer(b7d)
        b7d = self.branch7x7dbl_5(b7d)
        pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)
        return [b1, b7, b7d, self.branch_pool(pool)]


class _InceptionE(InceptionE):
    """Mixed_7b (average pool without padding) or, with `max_pool`, Mixed_7c (max pool)."""

    def __init__(self, in_channels: int, max_pool: bool) -> None:
        super().__init__(in_channels)
        self.max_pool = max_pool

    def _forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        b1 = self.branch1x1(x)
        b3 = self.branch3x3_1(x)
        b3 = torch.cat([self.branch3x3_2a(b3), self.branch3x3_2b(b3)], 1)
        b3d = self.branch3x3dbl_2(self.branch3x3dbl_1(x))
        b3d = torch.cat([self.branch3x3dbl_3a(b3d), self.branch3x3dbl_3b(b3d)], 1)
        if self.max_pool:
            pool = F.max_pool2d(x, kernel_size=3, stride=1, padding=1)
        else:
            pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1, count_include_pad=False)
        return [b1, b3, b3d, self.branch_pool(pool)]


def resize_bilinear_tf1(x: torch.Tensor, size: int) -> torch.Tensor:
    """TensorFlow 1.x `resize_bilinear(align_corners=False)` of (N, C, H, W) to (size, size).

    Output pixel i samples the input at i * in / out (no half-pixel offset), interpolating
    between floor and floor + 1, the upper index clamped to the last row or column.
    """

    def axis(n_in: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # float32 coordinates, as TensorFlow computes them
        src = torch.arange(size, dtype=torch.float32, device=x.device) * (n_in / size)
        lo = src.floor().long().clamp_(max=n_in - 1)
        hi = (lo + 1).clamp_(max=n_in - 1)
        return lo, hi, (src - lo.float()).to(x.dtype)

    ylo, yhi, dy = axis(x.shape[2])
    xlo, xhi, dx = axis(x.shape[3])
    top, bottom = x[:, :, ylo], x[:, :, yhi]  # (N, C, size, W)
    top = top[..., xlo] + (top[..., xhi] - top[..., xlo]) * dx
    bottom = bottom[..., xlo] + (bottom[..., xhi] - bottom[..., xlo]) * dx
    return top + (bottom - top) * dy[:, None]


class InceptionV3TF(nn.Module):
    """uint8-valued images (N, 3, H, W) as floats in [0, 255] -> (unbiased logits (N, 1008),
    pool_3 features (N, 2048)). Load weights into `.net` (torchvision's key names)."""

    def __init__(self) -> None:
        super().__init__()
        net = Inception3(num_classes=NUM_OUTPUTS, aux_logits=False, init_weights=False)
        for name, channels, pool in (
            ("Mixed_5b", 192, 32),
            ("Mixed_5c", 256, 64),
            ("Mixed_5d", 288, 64),
        ):
            setattr(net, name, _InceptionA(channels, pool_features=pool))
        for name, c7 in (
            ("Mixed_6b", 128),
            ("Mixed_6c", 160),
            ("Mixed_6d", 160),
            ("Mixed_6e", 192),
        ):
            setattr(net, name, _InceptionC(768, channels_7x7=c7))
        net.Mixed_7b = _InceptionE(1280, max_pool=False)
        net.Mixed_7c = _InceptionE(2048, max_pool=True)
        self.net = net

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        net = self.net
        if x.shape[-1] != INPUT_SIZE or x.shape[-2] != INPUT_SIZE:
            x = resize_bilinear_tf1(x, INPUT_SIZE)
        x = (x - 128.0) / 128.0  # (N, 3, 299, 299)
        for layer in (net.Conv2d_1a_3x3, net.Conv2d_2a_3x3, net.Conv2d_2b_3x3, net.maxpool1):
            x = layer(x)  # (N, 64, 73, 73) after the first max pool
        for layer in (net.Conv2d_3b_1x1, net.Conv2d_4a_3x3, net.maxpool2):
            x = layer(x)  # (N, 192, 35, 35)
        for layer in (net.Mixed_5b, net.Mixed_5c, net.Mixed_5d, net.Mixed_6a):
            x = layer(x)  # (N, 768, 17, 17) after Mixed_6a
        for layer in (net.Mixed_6b, net.Mixed_6c, net.Mixed_6d, net.Mixed_6e, net.Mixed_7a):
            x = layer(x)  # (N, 1280, 8, 8) after Mixed_7a
        x = net.Mixed_7c(net.Mixed_7b(x))  # (N, 2048, 8, 8)
        features = torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)  # (N, 2048): pool_3
        return features @ net.fc.weight.T, features
