"""Evaluation and classifier training on a GPU (skipped without CUDA; `pytest -m gpu`)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import make_samples, save_tiny

from distcgan.cli import main

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning"),
]


def test_scores_on_the_gpu_equal_the_cpu_ones(tmp_path, digits_file):
    samples = make_samples(digits_file, tmp_path / "s.h5")
    net = save_tiny(tmp_path / "tiny.pt")
    args = ["evaluate", "--samples", str(samples), "--data", str(digits_file)]
    args += ["--network", str(net), "--splits", "3"]
    for device in ("cpu", "cuda:0"):
        assert main([*args, "--devices", device, "--json", str(tmp_path / f"{device}.json")]) == 0
    cpu, gpu = (json.loads((tmp_path / f"{d}.json").read_text()) for d in ("cpu", "cuda:0"))
    for key in ("is_mean", "is_std", "fid"):
        assert gpu[key] == pytest.approx(cpu[key], rel=1e-4), key
    assert gpu["class_accuracy"] == cpu["class_accuracy"]


def test_classifier_trains_on_the_gpu(tmp_path, digits_file, capsys):
    out = tmp_path / "c.pt"
    args = ["classifier", "train", str(digits_file), "--out", str(out), "--epochs", "2"]
    assert main([*args, "--devices", "cuda:0"]) == 0
    assert "on cuda:0" in capsys.readouterr().out
    module = torch.jit.load(str(out))  # saved for the CPU, loadable anywhere
    assert module(torch.zeros(1, 1, 16, 16)).shape == (1, 10)
