"""`distcgan evaluate` with the Inception networks (random weights saved to files), end to end,
against the same weights run through torchvision directly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import exact_fid, naive_is
from torchvision.models import inception_v3

from distcgan.cli import main
from distcgan.data import load_class, write_dataset
from distcgan.eval.metrics.inception_tf import InceptionV3TF

pytestmark = pytest.mark.slow


def small_file(digits_file, path, classes, per_class: int, noise: int):
    """`per_class` digits of each of `classes`, with noise: a tiny data or sample file."""
    rng = np.random.default_rng(noise)
    x = np.concatenate([load_class(str(digits_file), k)[:per_class] for k in classes])
    x = np.clip(x.astype(np.int16) + rng.integers(-noise, noise + 1, x.shape), 0, 255)
    labels = np.repeat(np.arange(len(classes)), per_class)
    write_dataset(path, x.astype(np.uint8), labels, [str(k) for k in classes], "test")
    return x.astype(np.uint8)


def test_inception_v3_scores_match_torchvision_directly(tmp_path, digits_file, tv_weights):  # noqa: F811
    # One class: each 2048-feature FID costs two 2048 x 2048 eigendecompositions on the CPU.
    real = small_file(digits_file, tmp_path / "real.h5", [3], per_class=5, noise=0)
    fake = small_file(digits_file, tmp_path / "fake.h5", [3], per_class=4, noise=60)
    out = tmp_path / "e.json"
    args = ["evaluate", "--samples", str(tmp_path / "fake.h5"), "--data", str(tmp_path / "real.h5")]
    args += ["--network", "inception-v3", "--weights", tv_weights, "--splits", "2"]
    assert main([*args, "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["network"], got["num_outputs"], got["feature_dim"]) == ("inception-v3", 1000, 2048)
    assert got["class_accuracy"] is None  # 1000 ImageNet outputs are not the data's classes

    ref = inception_v3(weights=None, aux_logits=True, init_weights=False).eval()
    ref.load_state_dict(torch.load(tv_weights))
    pooled = []
    ref.avgpool.register_forward_hook(lambda m, i, o: pooled.append(o.flatten(1)))

    def run(images):
        x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 127.5 - 1
        x = F.interpolate(x.repeat(1, 3, 1, 1), size=(299, 299), mode="bilinear")
        with torch.no_grad():
            logits = ref(x)
        return torch.softmax(logits.double(), 1).numpy(), pooled.pop().double().numpy()

    p_fake, f_fake = run(fake)
    _, f_real = run(real)
    is_mean, is_std = naive_is(p_fake, 2, seed=0)
    assert got["is_mean"] == pytest.approx(is_mean, rel=1e-4)
    assert got["fid"] == pytest.approx(exact_fid(f_real, f_fake), rel=1e-4)
    assert got["per_class_fid"]["0"] == pytest.approx(got["fid"], rel=1e-5)  # float32 cache


def test_inception_v3_tf_score_uses_the_tf_input_and_unbiased_logits(
    tmp_path,
    digits_file,
    tf_weights,  # noqa: F811
    tf_state,  # noqa: F811
):
    fake = small_file(digits_file, tmp_path / "fake.h5", [0, 1], per_class=2, noise=60)
    out = tmp_path / "e.json"
    args = ["evaluate", "--samples", str(tmp_path / "fake.h5"), "--network", "inception-v3-tf"]
    assert main([*args, "--weights", tf_weights, "--splits", "2", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert (got["num_outputs"], got["fid"]) == (1008, None)
    model = InceptionV3TF().eval()
    model.net.load_state_dict(tf_state)
    x = torch.from_numpy(fake).permute(0, 3, 1, 2).float().repeat(1, 3, 1, 1)  # [0, 255]
    with torch.no_grad():
        logits, _ = model(x)
    is_mean, _ = naive_is(torch.softmax(logits.double(), 1).numpy(), 2, seed=0)
    assert got["is_mean"] == pytest.approx(is_mean, rel=1e-4)
