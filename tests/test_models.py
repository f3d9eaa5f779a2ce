"""The paper's generator and discriminator: shapes, layers and initialisation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from distcgan.train.models import Discriminator, Generator, init_weights


@pytest.mark.parametrize("res", [16, 32, 64])
@pytest.mark.parametrize("channels", [1, 3])
def test_shapes_follow_the_paper(res, channels):
    G = Generator(100, channels, res).apply(init_weights)
    D = Discriminator(channels, res).apply(init_weights)
    assert G.l1.in_features == 100 and G.l1.out_features == 128 * (res // 4) ** 2
    assert D.adv_layer.in_features == 128 * (res // 16) ** 2
    x = G(torch.randn(5, 100))
    assert x.shape == (5, channels, res, res) and x.abs().max() <= 1.0
    assert D(x).shape == (5, 1)


def test_layers_and_initialisation():
    torch.manual_seed(0)
    G = Generator(100, 1, 32).apply(init_weights)
    D = Discriminator(1, 32).apply(init_weights)
    convs = [m for m in D.model if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.stride) for c in convs] == [
        (1, 16, (2, 2)),
        (16, 32, (2, 2)),
        (32, 64, (2, 2)),
        (64, 128, (2, 2)),
    ]
    d_bns = [m for m in D.model if isinstance(m, nn.BatchNorm2d)]
    assert len(d_bns) == 3 and all(b.eps == 0.8 for b in d_bns)
    assert sum(isinstance(m, nn.Dropout) and m.p == 0.25 for m in D.model) == 4
    g_bns = [m for m in G.conv_blocks if isinstance(m, nn.BatchNorm2d)]
    assert [b.eps for b in g_bns] == [1e-5, 0.8, 0.8]
    w = torch.cat(
        [m.weight.flatten() for m in [*G.modules(), *D.modules()] if isinstance(m, nn.Conv2d)]
    )
    assert abs(w.std().item() - 0.02) < 0.002 and abs(w.mean().item()) < 0.002
    g = torch.cat([b.weight for b in g_bns + d_bns])
    assert abs(g.mean().item() - 1.0) < 0.01 and 0.01 < g.std().item() < 0.03


@pytest.mark.parametrize("fuse", [1, 3])
def test_d_takes_its_batchnorm_eps_from_the_option(fuse):
    D = Discriminator(1, 32, fuse=fuse, bn_eps=1e-5)
    assert [m.eps for m in D.modules() if isinstance(m, nn.BatchNorm2d)] == [1e-5] * 3


def test_unsupported_resolution():
    with pytest.raises(ValueError, match="resolution must be one of"):
        Generator(100, 1, 48)
