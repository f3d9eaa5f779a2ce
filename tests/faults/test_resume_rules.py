"""A resume trains what the run would have trained, or says why not: one that would change a
started class's data-parallel group size or its threads per rank is refused in one line naming
the class, what would change and --allow-regroup; with that flag it goes on, says so in one line
and records the change in launches/NNN.json. A class not yet started may be regrouped freely.
(A 2-class run killed and resumed on 3 ranks silently made class 0 a group of 2.)"""

from __future__ import annotations

import json

import pytest
from helpers import own_lines, run_cli, tiny_args

from distcgan.errors import UserError
from distcgan.run.rundir import RunDir
from distcgan.train.regroup import Targets, changes, check_regroup

# Rank 0 is killed at class 0's step 5 (checkpoints every 3), so class 0 is started.
COMMON = "--classes 0 1 --steps 12 --checkpoint-every 3 --threads 1 --devices cpu".split()


def _row(rank, group, tasks, threads=1, device="cpu"):
    return {
        "rank": rank,
        "group": list(group),
        "tasks": list(tasks),
        "threads": threads,
        "device_g": device,
        "device_d": device,
    }


TWO_ON_TWO = [_row(0, [0], ["class_000"]), _row(1, [1], ["class_001"])]
TWO_ON_THREE = [
    _row(0, [0, 1], ["class_000"]),
    _row(1, [0, 1], ["class_000"]),
    _row(2, [2], ["class_001"]),
]
TWO_ON_ONE = [_row(0, [0], ["class_000", "class_001"])]


def test_a_started_class_regrouped_is_a_change_and_an_unstarted_one_is_not():
    both = ["class_000", "class_001"]
    group = "group 1 -> 2 ranks (each rank's batch and data shard)"
    assert changes(TWO_ON_TWO, TWO_ON_THREE, both) == [("class 0", group)]
    assert changes(TWO_ON_TWO, TWO_ON_THREE, ["class_001"]) == []  # class 0 not started
    assert changes(TWO_ON_TWO, TWO_ON_ONE, both) == []  # each class still alone, 1 thread


def test_threads_per_rank_change_on_cpus_and_not_on_gpus():
    two_threads = [_row(0, [0], ["class_000", "class_001"], threads=2)]
    assert changes(TWO_ON_TWO, two_threads, ["class_001"]) == [
        ("class 1", "threads 1 -> 2 per rank")
    ]
    on_gpu = [_row(r, [r], [f"class_00{r}"], threads=1 + r, device="cuda:0") for r in (0, 1)]
    assert changes(on_gpu, [_row(0, [0], ["class_000"], 4, "cuda:0")], ["class_000"]) == []
    gan = [_row(0, [0], ["all"])]
    assert changes(gan, [_row(0, [0, 1], ["all"]), _row(1, [0, 1], ["all"])], ["all"]) == [
        ("task all", "group 1 -> 2 ranks (each rank's batch and data shard)")
    ]


def _started_run(path, rows, done=()):
    """A run directory whose last launch had `rows`, both classes checkpointed, `done` finished
    at 12 steps."""
    rd = RunDir(path)
    path.mkdir()
    rd.write_env({"ranks_detail": rows})
    for k in (0, 1):
        (path / f"class_{k:03d}").mkdir()
        (path / f"class_{k:03d}" / "checkpoint.pt").write_bytes(b"")
    for k in done:
        (path / f"class_{k:03d}" / "result.json").write_text('{"status": "done", "steps": 12}')
    return rd


def test_more_threads_alone_can_be_undone_with_threads(tmp_path):
    rd = _started_run(tmp_path / "run", TWO_ON_TWO)
    two_threads = [_row(0, [0], ["class_000", "class_001"], threads=2)]
    with pytest.raises(UserError) as caught:
        check_regroup(rd, two_threads, Targets(12), allow=False)
    assert str(caught.value) == (
        "--resume would change how started class 0 trains (and 1 more started task(s)): threads "
        "1 -> 2 per rank, so it would end with other weights than the run would have: resume on "
        "2 ranks as the last launch did, or pass --threads 1, or pass --allow-regroup to train "
        "on with the change"
    )
    # The advised --threads 1 keeps both classes as they were.
    assert check_regroup(rd, TWO_ON_ONE, Targets(12), allow=False) == []
    assert check_regroup(rd, two_threads, Targets(12), allow=True) == [
        "class 0: threads 1 -> 2 per rank",
        "class 1: threads 1 -> 2 per rank",
    ]
    # A class done at the steps asked trains no further: its layout may change.
    done = _started_run(tmp_path / "done", TWO_ON_TWO, done=(0, 1))
    assert check_regroup(done, two_threads, Targets(12), allow=False) == []
    with pytest.raises(UserError, match="started class 0 trains"):
        check_regroup(done, two_threads, Targets(20), allow=False)  # more steps: both go on


def _killed_run(run, digits_file):
    killed = run_cli(
        *tiny_args(digits_file, run, *COMMON, "--inject-fault", "kill:0:5:0"), ranks=2, timeout=180
    )
    assert killed.returncode != 0
    # Class 0 is started (checkpoint at step 3); class 1, on rank 1, may or may not be: it
    # stays a group of 1 on 3 ranks, so either way only class 0 changes.
    assert (run / "class_000" / "checkpoint.pt").is_file(), killed.stderr


def _launches(run):
    return [json.loads(x) for x in (run / "launches.jsonl").read_text().splitlines()]


@pytest.mark.mpi
def test_a_resume_that_regroups_a_started_class_is_refused_and_the_hint_works(
    tmp_path, digits_file
):
    run = tmp_path / "run"
    _killed_run(run, digits_file)
    config = (run / "config.json").read_text()
    refused = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=3)
    assert refused.returncode == 2
    assert own_lines(refused.stderr) == [
        "distcgan: error: --resume would change how started class 0 trains: group 1 -> 2 ranks "
        "(each rank's batch and data shard), so it would end with other weights than the run "
        "would have: resume on 2 ranks as the last launch did, or pass --allow-regroup to train "
        "on with the change"
    ]
    assert len(_launches(run)) == 1 and (run / "config.json").read_text() == config
    # What the line advises: the rank count of the last launch.
    again = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert again.returncode == 0, again.stderr
    assert "regroup" not in again.stderr


@pytest.mark.mpi
def test_allow_regroup_trains_on_says_so_and_records_the_change(tmp_path, digits_file):
    run = tmp_path / "run"
    _killed_run(run, digits_file)
    args = ("train", "--run", str(run), "--resume", "--no-progress", "--allow-regroup")
    allowed = run_cli(*args, ranks=3)
    assert allowed.returncode == 0, allowed.stderr
    change = "class 0: group 1 -> 2 ranks (each rank's batch and data shard)"
    said = [x for x in allowed.stderr.splitlines() if "regroup" in x]
    assert said == [
        f"distcgan: warning: --allow-regroup: {change}: its weights will differ from an "
        "uninterrupted run's (recorded in this launch's launches/NNN.json)"
    ]
    assert _launches(run)[1]["regrouped"] == [change]
    record = json.loads((run / "launches" / "002.json").read_text())
    assert record["env"]["regrouped"] == [change]
    assert [r["group"] for r in record["env"]["ranks_detail"]] == [[0, 1], [0, 1], [2]]
