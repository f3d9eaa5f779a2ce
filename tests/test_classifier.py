"""`distcgan classifier train`: the held-out split, training on the digits, the exported file."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import run_cli

from distcgan.cli import main
from distcgan.data import read_info
from distcgan.env import git_commit
from distcgan.eval.classifier.train import held_out_split
from distcgan.eval.metrics.networks import METADATA

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


def test_held_out_split_is_seeded_stratified_and_disjoint():
    labels = np.repeat([0, 1, 2, 3], [10, 20, 2, 1])
    train, held = held_out_split(labels, 0.1, seed=0)
    assert np.intersect1d(train, held).size == 0
    assert np.array_equal(np.sort(np.concatenate([train, held])), np.arange(len(labels)))
    assert np.bincount(labels[held], minlength=4).tolist() == [1, 2, 1, 0]  # >= 1 of 2+ images
    again = held_out_split(labels, 0.1, seed=0)
    assert np.array_equal(held, again[1])
    assert not np.array_equal(held, held_out_split(labels, 0.1, seed=1)[1])
    assert held_out_split(labels, 0.0, seed=0)[1].size == 0


def test_classifier_trains_on_the_digits_and_scores_them(tmp_path, digits_file, capsys):
    out = tmp_path / "digits.pt"
    assert main(["classifier", "train", str(digits_file), "--out", str(out), "--epochs", "3"]) == 0
    printed = capsys.readouterr().out
    extra = {METADATA: ""}
    module = torch.jit.load(str(out), _extra_files=extra)
    meta = json.loads(extra[METADATA])
    held = sum(max(1, round(0.1 * n)) for n in read_info(str(digits_file)).counts)
    assert meta["held_out_images"] == held and meta["resolution"] == 16 and meta["channels"] == 1
    assert meta["class_names"] == [str(k) for k in range(10)]
    assert meta["held_out_accuracy"] > 0.8  # 3 epochs; 10 epochs reach about 0.98
    made = meta["provenance"]  # what made it, as the other commands' files say
    assert made["command"] == "classifier train" and made["options"]["epochs"] == 3
    assert made["options"]["data"] == str(digits_file) and made["git_commit"] == git_commit()
    assert f"held-out accuracy {meta['held_out_accuracy']:.4f} on {held} images" in printed
    x = torch.zeros(2, 1, 16, 16)
    assert module(x).shape == (2, 10) and module.features(x).shape == (2, 128)
    logits, features = module.logits_and_features(x)  # the one pass that evaluate makes
    assert torch.equal(logits, module(x)) and torch.equal(features, module.features(x))
    # The real digits scored with it: high accuracy, an IS well above 1 (3 epochs leave the
    # softmax soft: 10 epochs give about 7 of the 10 possible).
    res = tmp_path / "real.json"
    args = ["evaluate", "--samples", str(digits_file), "--network", str(out), "--json", str(res)]
    assert main(args) == 0
    got = json.loads(res.read_text())
    assert got["class_accuracy"]["overall"] > 0.8 and got["is_mean"] > 2.0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--out", "x.pth"], "--out x.pth must end in .pt (a TorchScript file)"),
        (["--out", "x.pt", "--held-out", "1.5"], "--held-out must be a fraction in [0, 1)"),
        (["--out", "x.pt", "--epochs", "0"], "--epochs and --batch-size must be >= 1"),
        (["--out", "x.pt", "--devices", "gpu"], "devices 'gpu' is not understood: use auto, cpu"),
        (["--out", "x.pt", "--seed", "-1"], "argument --seed: a seed is a whole number >= 0"),
    ],
)
def test_bad_classifier_input_is_one_clear_line(digits_file, capsys, extra, message):
    assert main(["classifier", "train", str(digits_file), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.mpi
def test_classifier_training_refuses_several_ranks(digits_file, tmp_path):
    out = tmp_path / "c.pt"
    result = run_cli("classifier", "train", str(digits_file), "--out", str(out), ranks=2)
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.count("classifier train runs on one process") == 1
