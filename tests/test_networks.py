"""Loading the three network kinds from files (random weights saved the way the real files are)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models import inception_v3
from torchvision.models.inception import InceptionA, InceptionE

from distcgan.errors import UserError
from distcgan.eval.metrics.inception_tf import (
    InceptionV3TF,
    _InceptionA,
    _InceptionE,
    resize_bilinear_tf1,
)
from distcgan.eval.metrics.networks import INCEPTION, INCEPTION_TF, load_network

IMAGES = np.random.default_rng(0).integers(0, 256, size=(3, 16, 16, 1), dtype=np.uint8)


def test_tf1_bilinear_resize_hand_values():
    # TF 1.x, align_corners=False: output i samples input i * in/out, no half-pixel offset.
    x = torch.tensor([1.0, 3.0]).view(1, 1, 1, 2).expand(1, 1, 2, 2).contiguous()
    out = resize_bilinear_tf1(x, 4)
    assert out[0, 0, 0].tolist() == [1.0, 2.0, 3.0, 3.0]
    # PyTorch's bilinear (half-pixel centres) differs: [1, 1.5, 2.5, 3].
    torch_out = F.interpolate(x, size=(4, 4), mode="bilinear", align_corners=False)
    assert torch_out[0, 0, 0].tolist() == [1.0, 1.5, 2.5, 3.0]
    y = torch.arange(9.0).view(1, 1, 3, 3)
    assert resize_bilinear_tf1(y, 2)[0, 0].tolist() == [[0.0, 1.5], [4.5, 6.0]]


def test_tf_inception_state_dict_has_the_ported_files_keys_and_shapes():
    state = InceptionV3TF().net.state_dict()
    # pytorch-fid's file is torchvision's Inception3 layout with 1008 outputs and no AuxLogits.
    reference = inception_v3(weights=None, aux_logits=False, init_weights=False, num_classes=1008)
    assert {k: v.shape for k, v in state.items()} == {
        k: v.shape for k, v in reference.state_dict().items()
    }
    shapes = {k: tuple(v.shape) for k, v in state.items()}
    assert shapes["Conv2d_1a_3x3.conv.weight"] == (32, 3, 3, 3)
    assert shapes["Mixed_5b.branch_pool.conv.weight"] == (32, 192, 1, 1)
    assert shapes["Mixed_6e.branch7x7dbl_5.conv.weight"] == (192, 192, 1, 7)
    assert shapes["Mixed_7b.branch3x3dbl_3b.conv.weight"] == (384, 384, 3, 1)
    assert shapes["Mixed_7c.branch_pool.conv.weight"] == (192, 2048, 1, 1)
    assert shapes["Mixed_7c.branch_pool.bn.running_var"] == (192,)
    assert shapes["fc.weight"] == (1008, 2048) and shapes["fc.bias"] == (1008,)
    assert not any(k.startswith("AuxLogits") for k in state)
    assert not any(k.endswith("conv.bias") for k in state)  # TF convs have no bias
    assert sum(1 for k in state if k.endswith("conv.weight")) == 94


def test_tf_blocks_pool_as_tensorflow_did():
    torch.manual_seed(0)
    tf_a, tv_a = _InceptionA(192, pool_features=32).eval(), InceptionA(192, 32).eval()
    tv_a.load_state_dict(tf_a.state_dict())
    x = torch.ones(1, 192, 6, 6)
    with torch.no_grad():
        pool_tf, pool_tv = tf_a(x)[0, -32:], tv_a(x)[0, -32:]  # the pool branch
    # Padding left out of the average: a constant input stays constant up to the borders. Up to
    # float32 rounding: a GEMM's kernels may sum a position's 192 channels in another order at
    # the edge of a tile (MKL's AVX2 kernels: 1.4e-5 relative, more than allclose's default
    # 1e-5). Padding counted in is off by a quarter or more at the borders.
    close = {"rtol": 1e-4, "atol": 1e-5}
    assert torch.allclose(pool_tf, pool_tf[:, :1, :1].expand_as(pool_tf), **close)
    assert not torch.allclose(pool_tv, pool_tv[:, :1, :1].expand_as(pool_tv), rtol=0.1)
    assert torch.allclose(pool_tf[:, 1:-1, 1:-1], pool_tv[:, 1:-1, 1:-1], **close)
    # Mixed_7c's pool branch takes a max pool; every other branch equals Mixed_7b's.
    e1, e2 = _InceptionE(2048, max_pool=False), _InceptionE(2048, max_pool=True)
    e2.load_state_dict(e1.state_dict())
    InceptionE(2048).load_state_dict(e1.state_dict())  # torchvision's key names
    x = torch.randn(1, 2048, 4, 4)
    with torch.no_grad():
        o1, o2 = e1.eval()(x), e2.eval()(x)
        direct = e2.branch_pool(F.max_pool2d(x, 3, stride=1, padding=1))
    assert torch.equal(o1[:, :-192], o2[:, :-192])
    assert torch.allclose(o2[:, -192:], direct)
    assert not torch.allclose(o1[:, -192:], o2[:, -192:])


def test_inception_v3_from_a_weights_file_matches_torchvision(tv_weights):
    net = load_network(INCEPTION, tv_weights, "cpu", channels=1, resolution=16)
    assert (net.num_outputs, net.feature_dim, net.name) == (1000, 2048, INCEPTION)
    logits, features = net(IMAGES)
    # The same weights through torchvision directly: [-1, 1], gray -> RGB, bilinear to 299.
    ref = inception_v3(weights=None, aux_logits=True, init_weights=False)
    ref.load_state_dict(torch.load(tv_weights))
    x = torch.from_numpy(IMAGES).permute(0, 3, 1, 2).float() / 127.5 - 1
    x = F.interpolate(x.repeat(1, 3, 1, 1), size=(299, 299), mode="bilinear", align_corners=False)
    with torch.no_grad():
        expected = ref.eval()(x)
    assert torch.allclose(logits, expected, rtol=1e-4, atol=1e-5)
    assert features.shape == (3, 2048)


def test_inception_v3_weights_come_from_the_hub_cache(tmp_path, monkeypatch, tv_weights):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(UserError) as err:
        load_network(INCEPTION, None, "cpu", channels=3, resolution=16)
    cached = tmp_path / "hub" / "checkpoints" / "inception_v3_google-0cc3c7bd.pth"
    assert str(err.value) == (
        "inception-v3 weights not found: fetch "
        "https://download.pytorch.org/models/inception_v3_google-0cc3c7bd.pth (torchvision's "
        "Inception-v3 ImageNet weights (Inception_V3_Weights.IMAGENET1K_V1)) and put it at "
        f"{cached}, or pass its path with --weights PATH (nothing is downloaded)"
    )
    cached.parent.mkdir(parents=True)
    cached.symlink_to(tv_weights)
    assert load_network(INCEPTION, None, "cpu", channels=3, resolution=16).num_outputs == 1000


@pytest.mark.parametrize("with_counters", [True, False])
def test_inception_v3_tf_loads_the_ported_file_and_returns_unbiased_logits(
    tmp_path, tf_state, with_counters
):
    state = dict(tf_state)
    if not with_counters:  # files ported from TensorFlow carry no BatchNorm counters
        state = {k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}
    path = tmp_path / "pt_inception.pth"
    torch.save(state, path)
    net = load_network(INCEPTION_TF, str(path), "cpu", channels=1, resolution=16)
    assert (net.num_outputs, net.feature_dim) == (1008, 2048)
    logits, features = net(IMAGES)
    weight = state["fc.weight"]
    assert torch.allclose(logits, features @ weight.T, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(logits, features @ weight.T + state["fc.bias"], atol=1e-3)
    # The input the graph saw: TF-1 resize of [0, 255] values, then (x - 128) / 128.
    seen = []
    net.module.net.Conv2d_1a_3x3.register_forward_hook(lambda m, i, o: seen.append(i[0]))
    net(IMAGES[:1])
    x = torch.from_numpy(IMAGES[:1]).permute(0, 3, 1, 2).float().repeat(1, 3, 1, 1)
    assert torch.allclose(seen[0], (resize_bilinear_tf1(x, 299) - 128) / 128)


def test_wrong_weight_files_say_which_file_is_needed(tmp_path, tv_weights, tf_weights):
    with pytest.raises(UserError, match=r"holds inception-v3 weights \(1000 outputs\), not "):
        load_network(INCEPTION_TF, tv_weights, "cpu", 3, 16)
    with pytest.raises(UserError, match="pass --network inception-v3-tf"):
        load_network(INCEPTION, tf_weights, "cpu", 3, 16)
    state = torch.load(tf_weights)
    del state["Mixed_6a.branch3x3.conv.weight"]
    torch.save(state, tmp_path / "cut.pth")
    with pytest.raises(UserError) as err:
        load_network(INCEPTION_TF, str(tmp_path / "cut.pth"), "cpu", 3, 16)
    assert "is not the inception-v3-tf weights file: 1 missing keys (first Mixed_6a" in str(
        err.value
    )
    assert "pt_inception-2015-12-05-6726825d.pth" in str(err.value)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="is not a PyTorch state-dict file"):
        load_network(INCEPTION, str(tmp_path / "junk.pth"), "cpu", 3, 16)
    with pytest.raises(UserError, match=r"--weights /nope.pth: no such file; fetch https://"):
        load_network(INCEPTION_TF, "/nope.pth", "cpu", 3, 16)


class _Tiny(nn.Module):
    def __init__(self, channels: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean((2, 3)))


class _Bad(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")
def test_torchscript_networks_and_their_errors(tmp_path):
    path = tmp_path / "tiny.pt"
    torch.jit.save(torch.jit.script(_Tiny()), str(path))
    net = load_network(str(path), None, "cpu", channels=1, resolution=16)
    logits, features = net(IMAGES)
    assert (
        net.name == "tiny.pt" and net.tag == "tiny" and (net.num_outputs, net.feature_dim) == (5, 5)
    )
    assert torch.equal(logits, features)  # no `features` method: FID uses the logits
    with pytest.raises(UserError, match=r"fails on a \(1, 3, 16, 16\) input in \[-1, 1\]"):
        load_network(str(path), None, "cpu", channels=3, resolution=16)
    with pytest.raises(UserError, match="holds its own weights: drop --weights"):
        load_network(str(path), "w.pth", "cpu", channels=1, resolution=16)
    torch.jit.save(torch.jit.script(_Bad()), str(tmp_path / "bad.pt"))
    with pytest.raises(UserError, match=r"to logits \(N, K\) and features \(N, D\), got \(1, 1"):
        load_network(str(tmp_path / "bad.pt"), None, "cpu", channels=1, resolution=16)
    torch.save(_Tiny().state_dict(), tmp_path / "state.pt")
    with pytest.raises(UserError, match="is not a TorchScript file"):
        load_network(str(tmp_path / "state.pt"), None, "cpu", channels=1, resolution=16)
    with pytest.raises(UserError, match="no such file, and not one of inception-v3, "):
        load_network("inception-v4", None, "cpu", channels=1, resolution=16)
