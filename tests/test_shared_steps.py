"""`train --mode per-class --shared-steps S` (issue 81): one job in two phases, in one run
directory. Phase one is a gan run's pair trained data-parallel by every rank in RUN/all/ (the same
weights as `train --mode gan`); phase two fine-tunes every class from its final weights, as
`--init-from` does. Checked here: both phases' weights against the runs they stand for; a class's
fine-tune the same on 1 rank and on 5, fused and alone (sync and async, with --augment); --resume
exact in phase one, at the boundary and in phase two; a resume that would regroup the unfinished
shared phase refused; a diverged shared phase ends the job with exit 3 and a hint that works; the
shared phase counted in the job's cost; each bad setting refused in one line. Tiny runs."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from helpers import REPO, assert_same_states, events, refusal, run_cli, tiny_args

from distcgan.cli import main
from distcgan.run.checkpoint import read

CLASSES = ("--classes", "0", "1", "2")
# The CPU arithmetic in which runs in one process, fused or alone, give the same bits.
EXACT_RUN = ("--d-dropout", "0", "--no-channels-last", "--threads", "1", "--devices", "cpu")
TWO_PHASE = (*CLASSES, "--steps", "4", "--shared-steps", "6", *EXACT_RUN)


def _state(run, task: str) -> dict:
    return read(run / task / "checkpoint.pt")


def _same_pair(run_a, run_b, task: str) -> None:
    assert_same_states(_state(run_a, task), _state(run_b, task), task)


def _same_run(run_a, run_b, tasks=("all", "class_000", "class_001", "class_002")) -> None:
    for task in tasks:
        _same_pair(run_a, run_b, task)


def _two_phase(digits_file, run, *extra) -> int:
    return main(tiny_args(digits_file, run, *TWO_PHASE, *extra))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, digits_file):
    """A two-phase run trained without a stop (one rank, the exact CPU arithmetic)."""
    run = tmp_path_factory.mktemp("straight") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with torch.backends.mkldnn.flags(enabled=False):
        assert _two_phase(digits_file, run) == 0
    torch.set_num_threads(threads)
    return run


# ---- what each phase is ------------------------------------------------------------------------


def test_the_shared_phase_is_a_gan_run_and_every_class_starts_from_it(
    straight, digits_file, tmp_path, exact_cpu
):
    """Phase one's pair is `train --mode gan`'s, bit for bit; each class's fine-tune is
    `--init-from` that gan run's, bit for bit; the run's summary counts both phases."""
    gan = tmp_path / "gan"
    gan_args = (*CLASSES, "--mode", "gan", "--steps", "6", *EXACT_RUN)
    assert main(tiny_args(digits_file, gan, *gan_args)) == 0
    _same_pair(straight, gan, "all")
    fine = tmp_path / "fine"
    fine_args = (*CLASSES, "--steps", "4", "--init-from", str(gan), *EXACT_RUN)
    assert main(tiny_args(digits_file, fine, *fine_args)) == 0
    for k in range(3):
        _same_pair(straight, fine, f"class_{k:03d}")
    summary = json.loads((straight / "summary.json").read_text())
    rows = {r["task"]: r for r in summary["classes"]}
    assert rows["all"]["status"] == "done" and rows["all"]["steps"] == 6
    assert rows["all"]["ranks"] == [0] and rows["all"]["class_id"] is None
    batch = 16  # the tiny preset's
    assert summary["job"]["images"] == 6 * batch + 3 * 4 * batch  # the shared phase counted
    assert summary["job"]["train_s"] == pytest.approx(sum(r["train_s"] for r in rows.values()))
    config = json.loads((straight / "config.json").read_text())
    assert (config["shared_steps"], config["init_from"]) == (6, "")


def test_the_dry_run_says_the_shared_phase(digits_file, tmp_path, capsys):
    capsys.readouterr()
    assert _two_phase(digits_file, tmp_path / "run", "--dry-run") == 0
    out = capsys.readouterr().out
    assert (
        "shared phase first: one DC-GAN on all 3 classes for 6 steps at a batch of 16, "
        "data-parallel over the job's 1 rank(s), in RUN/all/; then every pair above starts "
        "from its final weights (fresh Adam) and trains with no communication"
    ) in out
    assert not (tmp_path / "run").exists()


@pytest.mark.mpi
def test_a_class_fine_tuned_on_5_ranks_has_the_weights_it_has_on_1(digits_file, tmp_path):
    """On 5 ranks the shared phase is one data-parallel group of 5; the fine-tunes that start
    from its weights are those one rank trains from the same weights (a resume on 1 rank of the
    5-rank run whose class folders were removed: the shared phase, done, is not trained again)."""
    five, one = tmp_path / "five", tmp_path / "one"
    args = ("--classes", "0", "1", "2", "3", "4", "--steps", "4", "--shared-steps", "5")
    args += ("--threads", "1", "--fuse", "1", "--freeze-d", "1")
    done = run_cli(*tiny_args(digits_file, five, *args), ranks=5)
    assert done.returncode == 0, done.stderr
    starts = [e for e in events(done.stdout) if e["event"] == "class_start"]
    assert [e["group"] for e in starts if e["task"] == "all"] == [[0, 1, 2, 3, 4]] * 5
    shutil.copytree(five, one)
    for k in range(5):
        shutil.rmtree(one / f"class_{k:03d}")
    again = run_cli("train", "--run", str(one), "--resume", "--no-progress")
    assert again.returncode == 0, again.stderr
    again_starts = [e for e in events(again.stdout) if e["event"] == "class_start"]
    assert "all" not in {e["task"] for e in again_starts}  # done: not trained again
    _same_pair(five, one, "all")
    for k in range(5):
        _same_pair(five, one, f"class_{k:03d}")


@pytest.mark.parametrize(
    "how",
    [
        ("--schedule", "sync"),
        ("--schedule", "async", "--freeze-d", "2"),
        ("--augment", "translation"),
    ],
)
def test_a_fused_fine_tune_has_the_weights_of_one_alone(digits_file, tmp_path, exact_cpu, how):
    assert _two_phase(digits_file, tmp_path / "alone", "--fuse", "1", *how) == 0
    assert _two_phase(digits_file, tmp_path / "fused", "--fuse", "3", *how) == 0
    _same_run(tmp_path / "alone", tmp_path / "fused")


@pytest.mark.mpi
def test_data_parallel_class_groups_fine_tune_from_the_shared_start(digits_file, tmp_path):
    """2 classes on 4 ranks: the shared phase is one group of 4, each class a group of 2 whose
    replicas agree."""
    args = ("--classes", "0", "1", "--steps", "4", "--shared-steps", "4", "--threads", "1")
    done = run_cli(*tiny_args(digits_file, tmp_path / "run", *args), ranks=4)
    assert done.returncode == 0, done.stderr
    replicas = [e for e in events(done.stdout) if e["event"] == "replica"]
    groups = {}
    for e in replicas:
        groups.setdefault(e["task"], set()).add((e["g_sha256"], e["d_sha256"]))
    assert sorted(groups) == ["all", "class_000", "class_001"]
    assert all(len(hashes) == 1 for hashes in groups.values())  # every replica alike
    starts = [e for e in events(done.stdout) if e["event"] == "class_start"]
    assert {tuple(e["group"]) for e in starts if e["task"] != "all"} == {(0, 1), (2, 3)}


def test_the_shared_phase_ends_at_its_time_limit(digits_file, tmp_path):
    run = tmp_path / "run"
    args = (*CLASSES, "--steps", "4", "--shared-steps", "400", "--shared-time-limit-s", "0.01")
    assert main(tiny_args(digits_file, run, *args, "--log-every", "2", "--threads", "1")) == 0
    rows = {r["task"]: r for r in json.loads((run / "summary.json").read_text())["classes"]}
    assert rows["all"]["time_up"] is True and rows["all"]["steps"] < 400
    assert _state(run, "all")["step"] == rows["all"]["steps"]
    assert all(rows[f"class_{k:03d}"]["steps"] == 4 for k in range(3))


# ---- stops, resumes, failures ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        "term:-1:3",  # in the shared phase: it checkpoints, no class has begun
        "term:-1:5",  # at its last step: it is done, and no class begins
        "term:1:2",  # in the fine-tunes: class 0 done, class 1 stopped, class 2 not begun
    ],
)
def test_a_resume_trains_what_the_run_would_have_trained(
    straight, digits_file, tmp_path, exact_cpu, capsys, fault
):
    run = tmp_path / "run"
    capsys.readouterr()
    assert _two_phase(digits_file, run, "--inject-fault", fault) == 75
    said = capsys.readouterr().err
    assert f"continue with distcgan train --run {run} --resume" in said
    summary = json.loads((run / "summary.json").read_text())
    status = {r["task"]: r["status"] for r in summary["classes"]}
    if fault == "term:-1:3":  # the message says the phase; a stop after it, only the count
        assert "stopped by a signal in the shared phase (all/ at step 4) with 4 task(s)" in said
    else:
        assert "stopped by a signal with" in said and "shared phase" not in said
    if fault.startswith("term:-1:"):
        assert status["all"] == ("done" if fault == "term:-1:5" else "interrupted")
        assert status["class_000"] == status["class_002"] == "not_started"
        assert not (run / "class_000").exists()
    assert main(["train", "--run", str(run), "--resume", "--no-progress"]) == 0
    _same_run(straight, run)


@pytest.mark.mpi
def test_a_resume_that_would_regroup_the_unfinished_shared_phase_is_refused(digits_file, tmp_path):
    run = tmp_path / "run"
    args = (*CLASSES, "--steps", "4", "--shared-steps", "6", "--threads", "1")
    stopped = run_cli(*tiny_args(digits_file, run, *args, "--inject-fault", "term:-1:3"), ranks=2)
    assert stopped.returncode == 75, stopped.stderr
    alone = run_cli("train", "--run", str(run), "--resume", "--no-progress")
    assert alone.returncode == 2
    assert alone.stderr.strip().splitlines()[-1] == (
        "distcgan: error: --resume would change how started task all trains: group 2 -> 1 "
        "ranks (each rank's batch and data shard), so it would end with other weights than the "
        "run would have: resume on 2 ranks as the last launch did, or pass --allow-regroup to "
        "train on with the change"
    )
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert resumed.returncode == 0, resumed.stderr


def test_a_diverged_shared_phase_ends_the_job_and_its_hint_trains_anew(
    digits_file, tmp_path, capsys
):
    run = tmp_path / "run"
    capsys.readouterr()
    fault = ("--inject-fault", "nan-always:-1:2", "--max-retries", "1", "--log-every", "2")
    assert _two_phase(digits_file, run, *fault) == 3
    said = [line for line in capsys.readouterr().err.splitlines() if "shared phase" in line]
    assert len(said) == 1, said
    assert said[0].startswith(
        "distcgan: the shared phase (all/) diverged and was given up, so no class was "
        f"fine-tuned: train the run again with another --seed (python -m distcgan train "
        f"--config {run / 'config.json'} --seed 1 --run {run}-2)."
    )
    summary = json.loads((run / "summary.json").read_text())
    status = {r["task"]: r["status"] for r in summary["classes"]}
    assert status == {
        "all": "diverged",
        "class_000": "not_started",
        "class_001": "not_started",
        "class_002": "not_started",
    }
    hint = said[0].split("(python -m ", 1)[1].split(")", 1)[0]
    again = subprocess.run(
        [sys.executable, "-m", *shlex.split(hint), "--no-progress"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    config = json.loads((tmp_path / "run-2" / "config.json").read_text())
    assert (config["seed"], config["shared_steps"]) == (1, 6)


def test_a_nan_in_a_fine_tune_before_its_first_checkpoint_rolls_back_to_the_shared_start(
    straight, digits_file, tmp_path, exact_cpu, capsys
):
    run = tmp_path / "run"
    capsys.readouterr()
    assert _two_phase(digits_file, run, "--inject-fault", "nan:1:1", "--freeze-d", "2") == 0
    rollbacks = [e for e in events(capsys.readouterr().out) if e["event"] == "rollback"]
    assert [(e["class_id"], e["back_to"]) for e in rollbacks] == [(1, 0)]
    state, start = _state(run, "class_001"), _state(straight, "all")
    assert state["step"] == 4 and state["retries"] == 1
    assert torch.equal(state["D"]["model.0.weight"], start["D"]["model.0.weight"])  # frozen


# ---- refusals ----------------------------------------------------------------------------------


def test_each_bad_setting_is_refused_in_one_line(digits_file, tmp_path, capsys):
    def refused(*extra) -> str:
        return refusal(capsys, *tiny_args(digits_file, tmp_path / "run", *extra))

    for mode in ("gan", "cgan"):
        assert refused("--mode", mode, "--shared-steps", "6") == (
            "distcgan: error: --shared-steps trains a shared start for the pairs of --mode "
            f"per-class, and --mode {mode} trains one model on all the classes already: drop "
            "--shared-steps, or train with --mode per-class"
        )
    assert refused("--shared-steps", "-1") == (
        "distcgan: error: shared_steps must be >= 0 (0: no shared phase), got -1"
    )
    assert refused("--shared-steps", "6", "--init-from", str(tmp_path)) == (
        "distcgan: error: --shared-steps trains the start that --init-from would give: pass "
        "one of them"
    )
    assert refused("--shared-time-limit-s", "10") == (
        "distcgan: error: --shared-time-limit-s limits the shared phase, and this run has none: "
        "add --shared-steps S or drop --shared-time-limit-s"
    )
    assert refused("--shared-steps", "6", "--shared-time-limit-s", "-1") == (
        "distcgan: error: shared_time_limit_s must be >= 0 (0: no limit), got -1.0"
    )
    assert refused("--shared-steps", "6", "--freeze-d", "5") == (
        "distcgan: error: --freeze-d 5 is beyond D's depth: D has 4 blocks before its output "
        "layer; freeze 0 (none) to 4"
    )
    assert not (tmp_path / "run").exists()
