"""What a user sees of a run while it trains: D's statistics (logit_gap, d_acc) and the
TensorBoard events under RUN/tb/class_XXX/ (scalars at each log step, grids, no duplicate steps
after a resume or a rollback, one writer open at a time)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from helpers import tiny_args

from distcgan.config import tiny
from distcgan.mpi.context import TrainGroup
from distcgan.run.rundir import RunDir
from distcgan.train.files import TaskFiles
from distcgan.train.step import STAT_KEYS, d_stats

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def events(path) -> event_accumulator.EventAccumulator:
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    return acc


def steps(path, tag: str = "loss_d") -> list[int]:
    return [e.step for e in events(path).Scalars(tag)]


def test_d_stats_pins_what_each_column_means():
    # D(x) logits: two real images right (> 0), one wrong; fakes: one right (< 0), one wrong.
    real, fake = torch.tensor([2.0, 1.0, -0.5]), torch.tensor([-1.0, 3.0])
    d_real, d_fake, logit_gap, d_acc, d_real_sign = d_stats(real, fake).tolist()
    assert d_real == pytest.approx(torch.sigmoid(real).mean().item())
    assert d_fake == pytest.approx(torch.sigmoid(fake).mean().item())
    assert logit_gap == pytest.approx((2.0 + 1.0 - 0.5) / 3 - (-1.0 + 3.0) / 2)
    assert d_acc == pytest.approx(3 / 5)
    assert d_real_sign == pytest.approx((1 + 1 - 1) / 3)  # ADA's r_t: signs of the real logits
    # A D that cannot tell them apart: the same logits on both sides, gap 0, no image right.
    assert d_stats(torch.zeros(4), torch.zeros(4)).tolist() == [0.5, 0.5, 0.0, 0.0, 0.0]
    assert STAT_KEYS[2:] == ("d_real", "d_fake", "logit_gap", "d_acc", "d_real_sign")


def _files(tmp_path, lead: bool = True) -> TaskFiles:
    run = RunDir(tmp_path)
    group = TrainGroup(ranks=(0, 1), rank=0 if lead else 1, comm=None)
    return TaskFiles(run.task("class_003"), tiny(), group, run.tensorboard("class_003"))


def test_a_rollback_or_resume_continues_the_curves_without_duplicate_steps(tmp_path):
    files = _files(tmp_path)
    for step in (2, 4, 6, 8):
        files.append_metrics({"step": step, "loss_d": float(step), "task": "class_003"})
    files.truncate_metrics(4)  # back to the checkpoint at step 4, as a rollback or a resume does
    for step in (6, 8, 10):
        files.append_metrics({"step": step, "loss_d": 100.0 + step})
    files.close()
    tb = RunDir(tmp_path).tensorboard("class_003")
    assert steps(tb) == [2, 4, 6, 8, 10]
    assert [e.value for e in events(tb).Scalars("loss_d")][2:] == [106.0, 108.0, 110.0]
    assert "task" not in events(tb).Tags()["scalars"]  # only numbers are curves


def test_only_the_groups_first_rank_writes_events(tmp_path):
    files = _files(tmp_path, lead=False)
    files.append_metrics({"step": 2, "loss_d": 1.0})
    files.close()
    assert not (tmp_path / "tb").exists()


def test_file_handles_stay_bounded_over_many_classes(tmp_path):
    run = RunDir(tmp_path)
    group = TrainGroup(ranks=(0,), rank=0, comm=None)
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    for class_id in range(40):  # each class opens its writer while it trains, closes it when done
        name = f"class_{class_id:03d}"
        files = TaskFiles(run.task(name), tiny(), group, run.tensorboard(name))
        files.append_metrics({"step": 2, "loss_d": 1.0})
        assert fds() <= before + 2
        files.close()
    assert fds() == before
    assert len(list((tmp_path / "tb").iterdir())) == 40


def test_a_run_writes_each_class_curves_and_grids_and_resumes_them(tmp_path, digits_file):
    from distcgan.cli import main

    run = tmp_path / "run"
    common = ("--classes", "2", "--sample-every", "2")
    assert main(tiny_args(digits_file, run, *common, "--steps", "4")) == 0
    assert main(tiny_args(digits_file, run, *common, "--steps", "8", "--resume")) == 0
    tb = run / "tb" / "class_002"
    lines = [json.loads(x) for x in (run / "class_002" / "metrics.jsonl").read_text().splitlines()]
    assert steps(tb) == [x["step"] for x in lines] == [2, 3, 4, 6, 8]  # 3, 6: checkpoints
    acc = events(tb)
    assert set(STAT_KEYS) <= set(acc.Tags()["scalars"])
    assert [e.step for e in acc.Images("grid")] == [2, 4, 6, 8]
    assert acc.Images("grid")[0].width == acc.Images("grid")[0].height  # the 8 x 8 grid
    gaps = [e.value for e in acc.Scalars("logit_gap")]
    assert np.ptp(gaps) > 0  # D's signal moves, unlike d_real and d_fake at BatchNorm eps 0.8


def test_no_tensorboard_writes_no_events(tmp_path, digits_file):
    from distcgan.cli import main

    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "2", "--no-tensorboard")) == 0
    assert (run / "class_002" / "metrics.jsonl").exists()
    assert not (run / "tb").exists()
