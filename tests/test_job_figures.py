"""The job's seconds and images/s say what they divide by and are right: a rank trains its
classes one after another, so the job's training time is the slowest rank's sum, not its slowest
class (the report page showed a run of 5 classes a rank at 4x its speed)."""

from __future__ import annotations

import json
import re

import pytest
from helpers import run_cli, tiny_args

from distcgan.compare.experiment import slowest_rank_s
from distcgan.report.page import write_report
from distcgan.run.rundir import RunDir, TaskRow, job_speed

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


def _row(class_id: int, rank: int, train_s: float, ranks: list[int] | None = None) -> TaskRow:
    return TaskRow(
        class_id=class_id, task=f"class_{class_id:03d}", status="done", rank=rank,
        ranks=ranks or [rank], steps=10, effective_batch=16, train_s=train_s,
    )  # fmt: skip


def test_the_slowest_rank_sums_its_classes_and_a_group_counts_on_each_of_its_ranks():
    rows = [
        _row(0, 0, 100.0),
        _row(1, 0, 50.0),  # rank 0: 150 s, its two classes in turn
        _row(2, 1, 120.0),  # rank 1: 120 s, the slowest class
        _row(3, 2, 140.0, ranks=[2, 3]),  # a data-parallel group: 140 s on ranks 2 and 3
    ]
    assert slowest_rank_s(rows) == 150.0
    assert job_speed(rows) == {"images": 640, "train_s": 150.0, "imgs_per_s": round(640 / 150, 1)}
    assert job_speed([]) == {"images": 0, "train_s": 0.0, "imgs_per_s": 0.0}


def _headline(page: str) -> dict[str, str]:
    head = page[page.index("id='headline'") :].split("</div></div>")[0]
    return {name: value for value, name in re.findall(r"<b>([^<]*)</b><span>([^<]*)</span>", head)}


def test_a_run_of_three_classes_on_one_rank_reports_their_sum(tmp_path, digits_file):
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--classes", "0", "1", "2", "--steps", "8")
    trained = run_cli(*args)
    assert trained.returncode == 0, trained.stderr
    summary = json.loads((run / "summary.json").read_text())
    rows = summary["classes"]
    total_s = sum(c["train_s"] for c in rows)
    images = sum(c["steps"] * c["effective_batch"] for c in rows)
    assert summary["job"]["train_s"] == pytest.approx(total_s, abs=2e-3)
    assert summary["job"]["images"] == images == 3 * 8 * rows[0]["effective_batch"]
    assert summary["job"]["imgs_per_s"] == pytest.approx(images / total_s, rel=1e-3, abs=0.1)
    assert summary["job"]["train_s"] > summary["max_train_s"]  # three classes, not the slowest
    assert f"training {summary['job']['train_s']:.1f} s on the slowest rank" in trained.stdout
    headline = _headline(write_report(run).read_text())
    assert headline["training s (slowest rank, its classes in turn)"] == f"{total_s:.0f}"
    shown = headline["images/s (all images / those seconds)"]
    assert float(shown.replace(",", "")) == pytest.approx(images / total_s, rel=0.01, abs=1)
    assert RunDir(run).summary_rows() == [TaskRow.from_dict(c) for c in rows]
