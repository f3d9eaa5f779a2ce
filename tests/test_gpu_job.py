"""benchmarks/gpu_job.sh and gpu_job.py: one training job end to end (issue 80), from generated
images to an export, each command timed, then bench at the job's shape. Run here at a tiny size
on the CPU (the GPU figures are measurements, not asserted): the job ends, its figures add up to
what its files say, and the images it makes differ by class."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO

SCRIPT = REPO / "benchmarks" / "gpu_job.sh"


def _job():
    """benchmarks/gpu_job.py as a module."""
    if "gpu_job" not in sys.modules:
        spec = importlib.util.spec_from_file_location("gpu_job", REPO / "benchmarks" / "gpu_job.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_job"] = module
        spec.loader.exec_module(module)
    return sys.modules["gpu_job"]


TINY = {
    "JOB_DEVICE": "cpu",
    "JOB_CLASSES": "3",
    "JOB_PER_CLASS": "40",
    "JOB_STEPS": "4",
    "JOB_BATCH": "16",
    "JOB_AMP": "off",  # bf16 on a CPU without AMX or AVX-512 bf16 runs 20x slower
    "JOB_FUSE": "3",  # fused on the CPU too (auto is 1 there), as auto fuses on a GPU
    "JOB_SAMPLES": "8",
    "JOB_EVAL_N": "30",
    "JOB_CLASSIFIER_EPOCHS": "1",
    "JOB_BENCH_WINDOWS": "1",
    "JOB_BENCH_STEPS": "1",
}


def _run_job(out, **env):
    full = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, **env}
    cmd = ["bash", str(SCRIPT)]
    return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=600)


@pytest.mark.slow
def test_the_job_runs_from_generated_images_to_an_export_and_its_figures_add_up(tmp_path):
    """Two to three minutes on 2 CPU cores: 3 classes fused, 4 steps. Every command ran; train
    wrote one checkpoint and one grid a class (its end: the preset checkpoints every 1,000
    steps), and its wall time splits into start-up, loading, training, writes and the rest;
    the images/s are the summary's and bench's."""
    out = tmp_path / "job"
    result = _run_job(out, **TINY)
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout.strip().splitlines()[-1])
    assert job == json.loads((out / "job.json").read_text()) and job["failed"] == {}
    steps = ["images", "data_prep", "classifier", "train", "sample", "evaluate", "export", "bench"]
    assert list(job["seconds"]) == steps
    summary = json.loads((out / "run" / "summary.json").read_text())
    assert job["images_trained"] == summary["job"]["images"] == 3 * 4 * 16
    assert job["fuse"] == 3 and job["bench"]["fuse"] == 3 and not job["graphed"]
    assert job["checkpoints"] == job["grids"] == 3 and job["scores_in_training_s"] == 0
    rows = summary["classes"]  # the run's own figures: one checkpoint and one grid a class
    assert [(r["checkpoints"], r["grids"]) for r in rows] == [(1, 1)] * 3
    split = job["train_split_s"]
    assert sum(split.values()) == pytest.approx(job["seconds"]["train"], abs=0.01)
    assert split["train_s"] == summary["job"]["train_s"] and split["checkpoint_s"] > 0
    assert job["step_img_s"] == job["bench"]["fused_img_s"]
    assert job["job_vs_step"] == pytest.approx(job["job_img_s"] / job["step_img_s"], rel=0.02)
    assert sum(job["job_shares"].values()) == pytest.approx(1, abs=1e-3)
    for made in ("samples.h5", "export/model.safetensors", "run/evaluate-classifier.json"):
        assert (out / made).is_file(), made
    assert "one job: 3 classes x 4 steps of 16, 32 px RGB, amp off, on cpu" in result.stdout


def test_an_existing_folder_is_refused_in_one_line(tmp_path):
    result = _run_job(tmp_path, **TINY)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gpu_job.py: error: {tmp_path} exists: give a new folder (the job writes a run there)"
    ]


def test_a_missing_out_is_said():
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    result = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env)
    assert result.returncode != 0 and "set OUT to a new folder" in result.stderr


def test_the_images_are_rows_of_downsampled_imagenet_and_differ_by_class():
    data, labels = _job().images(4, 25)
    assert data.shape == (100, 3 * 32 * 32) and data.dtype == np.uint8
    assert labels.tolist() == [k for k in range(1, 5) for _ in range(25)]
    # each class its own colour: the mean of each channel over a class's images
    means = data.reshape(4, 25, 3, -1).astype(float).mean(axis=(1, 3))  # (class, channel)
    spread = data.reshape(4, 25, 3, -1).astype(float).mean(axis=3).std(axis=1)  # within a class
    gaps = [np.abs(means[i] - means[j]).max() for i in range(4) for j in range(i + 1, 4)]
    assert min(gaps) > 3 * spread.max()


def test_the_fused_groups_are_read_from_train_s_events():
    stdout = "\n".join(
        [
            "some table line",
            json.dumps({"rank": 0, "event": "fused", "classes": [0, 1, 2], "cuda_graph": False}),
            json.dumps({"rank": 0, "event": "class_done", "classes": [0]}),
            json.dumps({"rank": 0, "event": "fused", "classes": [3, 4], "cuda_graph": True}),
        ]
    )
    assert _job().fused_groups(stdout) == (3, True)
    assert _job().fused_groups(stdout.replace("true", "false")) == (3, False)
    assert _job().fused_groups("no events\n") == (1, False)
