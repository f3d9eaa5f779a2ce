"""`distcgan evaluate` against an independent implementation: torchmetrics' InceptionScore and
FrechetInceptionDistance given the same network (as a custom feature extractor) and the same
samples. torchmetrics is a test-only dependency (the dev extra).

Two conventions differ and are bridged here, not papered over:
- torchmetrics shuffles with `torch.randperm` and cuts with `Tensor.chunk`; we shuffle with
  numpy's seeded permutation. With n divisible by the splits the two cuts have equal sizes, and
  feeding torchmetrics the samples in the order that its own permutation maps onto ours makes
  its splits hold exactly our splits' samples.
- torchmetrics reports the standard deviation over splits with Bessel's correction (ddof 1);
  ours is numpy's (ddof 0), as in the original IS code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers import copy_data, make_samples, save_tiny
from torch import nn

from distcgan.cli import main
from distcgan.data import load_class, read_info
from distcgan.eval.metrics.scores import split_assignment

torchmetrics = pytest.importorskip("torchmetrics", reason="torchmetrics is in the dev extra")
from torchmetrics.image.fid import FrechetInceptionDistance  # noqa: E402
from torchmetrics.image.inception import InceptionScore  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning"),
    pytest.mark.filterwarnings("ignore:Metric `InceptionScore` will save:UserWarning"),
    pytest.mark.filterwarnings("ignore:std\\(\\). degrees of freedom:UserWarning"),
]


class Scorer(nn.Module):
    """The TorchScript network as torchmetrics sees it: uint8 NCHW in, float64 out, mapped to
    [-1, 1] exactly as distcgan maps images before the network."""

    def __init__(self, path, what: str) -> None:
        super().__init__()
        self.net = torch.jit.load(str(path)).eval()
        self.what = what
        self.num_features = 8 if what == "features" else 10

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float() / 127.5 - 1
        with torch.no_grad():
            out = self.net.features(x) if self.what == "features" else self.net(x)
        return out.double()


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("net") / "tiny.pt")


@pytest.fixture(scope="module")
def fakes(tmp_path_factory, digits_file):
    return make_samples(digits_file, tmp_path_factory.mktemp("samples") / "samples.h5")


def images_of(path) -> torch.Tensor:
    """Every image of a data or sample file, class-sorted, as uint8 NCHW."""
    info = read_info(str(path))
    parts = [load_class(str(path), k) for k, c in enumerate(info.counts) if c]
    return torch.from_numpy(np.concatenate(parts)).permute(0, 3, 1, 2).contiguous()


def test_inception_score_and_fid_match_torchmetrics(tmp_path, digits_file, fakes, net):
    splits, seed = 4, 5
    data = copy_data(digits_file, tmp_path / "data")
    out = tmp_path / "eval.json"
    args = ["evaluate", "--samples", str(fakes), "--data", str(data), "--json", str(out)]
    args += ["--network", str(net), "--splits", str(splits), "--seed", str(seed)]
    assert main(args) == 0
    ours = json.loads(out.read_text())

    fake, real = images_of(fakes), images_of(data)
    n = len(fake)
    assert n % splits == 0  # equal split sizes in both conventions

    # Our split of each sample, then the order whose torch.randperm shuffle lands on it.
    split_of = split_assignment(n, splits, seed)
    ours_sorted = np.argsort(split_of, kind="stable")  # samples grouped split by split
    torch.manual_seed(123)
    tm_perm = torch.randperm(n).numpy()
    order = np.empty(n, dtype=np.int64)
    order[tm_perm] = ours_sorted  # fed[tm_perm[j]] = sample ours_sorted[j]

    metric = InceptionScore(feature=Scorer(net, "logits"), splits=splits)
    metric.update(fake[order])
    torch.manual_seed(123)  # compute() draws the same permutation
    tm_mean, tm_std = (float(v) for v in metric.compute())
    assert ours["is_mean"] > 1.5  # a score that can tell right from wrong
    assert ours["is_mean"] == pytest.approx(tm_mean, rel=1e-6)
    assert ours["is_std"] * math.sqrt(splits / (splits - 1)) == pytest.approx(tm_std, rel=1e-5)

    fid = FrechetInceptionDistance(feature=Scorer(net, "features"))
    fid.update(real, real=True)
    fid.update(fake, real=False)
    assert ours["fid"] == pytest.approx(float(fid.compute()), rel=1e-5)

    # Per-class FID: class k's samples against class k's real images.
    for k in (0, 7):
        fid = FrechetInceptionDistance(feature=Scorer(net, "features"))
        fid.update(images_of_class(data, k), real=True)
        fid.update(images_of_class(fakes, k), real=False)
        assert ours["per_class_fid"][str(k)] == pytest.approx(float(fid.compute()), rel=1e-4), k


def images_of_class(path, k: int) -> torch.Tensor:
    return torch.from_numpy(load_class(str(path), k)).permute(0, 3, 1, 2).contiguous()


def test_one_split_needs_no_bridging(tmp_path, digits_file, fakes, net):
    out = tmp_path / "eval.json"
    args = ["evaluate", "--samples", str(fakes), "--network", str(net)]
    assert main([*args, "--splits", "1", "--json", str(out)]) == 0
    metric = InceptionScore(feature=Scorer(net, "logits"), splits=1)
    metric.update(images_of(fakes))
    assert json.loads(out.read_text())["is_mean"] == pytest.approx(float(metric.compute()[0]), 1e-6)
