"""The digits classifier: a small CNN, images (N, C, R, R) in [-1, 1] -> logits (N, K), trained on
the real data and saved as TorchScript (`distcgan classifier train`, train.py): the usual
scoring network where ImageNet's Inception knows no digits. Its `features` method gives the 128
penultimate activations that FID uses, `logits_and_features` both in one pass (what `distcgan
evaluate` calls when a module has it).

The network is defined here, in the package's own module, because TorchScript records its class
by module and name in every saved file (`__torch__.distcgan.eval.classifier.SmallCNN`, as when
the classifier was one module): a file saved now is the one saved before. A saved file loads
without this code. Leaves out: training and saving (train.py), loading a file to score samples
(eval/metrics/networks.py loads any TorchScript file).
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 128


def _block(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]


class SmallCNN(nn.Module):
    """Images (N, C, R, R) in [-1, 1] -> logits (N, K); any R divisible by 4."""

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_block(channels, 32), nn.MaxPool2d(2),  # (N, 32, R/2, R/2)
            *_block(32, 64), nn.MaxPool2d(2),  # (N, 64, R/4, R/4)
            *_block(64, FEATURES), nn.AdaptiveAvgPool2d(1), nn.Flatten(),  # (N, 128)
        )  # fmt: skip
        self.head = nn.Linear(FEATURES, num_classes)

    @torch.jit.export
    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    @torch.jit.export
    def logits_and_features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Both in one pass (what `distcgan evaluate` calls when a module has it)."""
        f = self.body(x)
        return self.head(f), f

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))
