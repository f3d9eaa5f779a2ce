"""`train --init-from RUN` and `--freeze-d N` (issue 81) through the training job: every class's
pair starts from a finished gan run's final weights with fresh Adam states and its own seeds'
streams; a class's fine-tune is the same on 1 rank and on 5, fused and alone; D's first N
blocks stay as the start left them (alone, fused, in a data-parallel group, after a rollback);
--resume is exact and checks the start is unchanged; a NaN before the first checkpoint rolls
back to the start; and each bad setting is refused in one line. Tiny runs made with the CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
import types

import pytest
import torch
from helpers import assert_same_states, events, refusal, run_cli, tiny_args

from distcgan.cli import main
from distcgan.config import tiny
from distcgan.plan import make_tasks
from distcgan.run.checkpoint import read
from distcgan.train.init_from import freeze, frozen_d_parameters, read_start
from distcgan.train.pair import PairSpec, new_pair
from distcgan.train.task import group_nets, load_task_pair

GAN = ("--mode", "gan", "--classes", "0", "1", "2", "3", "4", "--steps", "4", "--threads", "1")
# The CPU arithmetic in which runs in one process, fused or alone, give the same bits.
EXACT_RUN = ("--d-dropout", "0", "--no-channels-last", "--threads", "1", "--devices", "cpu")
FROZEN = ("model.0.weight", "model.0.bias", "model.3.weight", "model.3.bias")  # blocks 1, 2
FROZEN += ("model.6.weight", "model.6.bias")  # block 2's BatchNorm


@pytest.fixture(scope="module")
def gan(tmp_path_factory, digits_file):
    """A finished gan run on classes 0-4 (4 steps): the start."""
    run = tmp_path_factory.mktemp("start") / "gan"
    done = run_cli(*tiny_args(digits_file, run, *GAN))
    assert done.returncode == 0, done.stderr
    return run


def _train(digits_file, run, gan, *extra) -> int:
    """An in-process per-class run of classes 0-2 from `gan`'s weights."""
    args = ("--classes", "0", "1", "2", "--init-from", str(gan), *EXACT_RUN, *extra)
    return main(tiny_args(digits_file, run, *args))


def _state(run, k):
    return read(run / f"class_{k:03d}" / "checkpoint.pt")


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)


def _same_checkpoints(run_a, run_b, classes=(0, 1, 2)) -> None:
    for k in classes:
        assert_same_states(_state(run_a, k), _state(run_b, k), k)


def _refusal(capsys, *args) -> str:
    return refusal(capsys, *args)


# ---- the start -------------------------------------------------------------------------------


def test_a_new_pair_starts_from_the_gan_runs_weights_with_fresh_adam_and_its_own_streams(
    gan, tmp_path
):
    start = read_start(gan)
    cfg = dataclasses.replace(tiny(), init_from=str(gan), freeze_d=2)
    task = make_tasks("per-class", (3,))[0]
    spec = PairSpec(cfg, task, 1, 10)
    job = types.SimpleNamespace(
        cfg=cfg,
        group=types.SimpleNamespace(rank=0, size=1),
        devices=("cpu", "cpu"),
        warn=print,
        cost=(1.0, 0.0),
        start=start,
    )
    files = types.SimpleNamespace(dir=types.SimpleNamespace(path=tmp_path))  # no checkpoint
    pair = load_task_pair(job, spec, files)
    cpu_after = torch.get_rng_state()
    scratch = new_pair(spec, "cpu", "cpu")  # from scratch: the same seeds
    assert torch.equal(torch.get_rng_state(), cpu_after)  # no draw of the start's own
    assert torch.equal(pair.noise.get_state(), scratch.noise.get_state())
    for role in ("G", "D", "G_ema"):
        assert _same(getattr(pair, role).state_dict(), getattr(start, role)), role
    assert not _same(pair.D.state_dict(), scratch.D.state_dict())
    assert pair.opt_g.state_dict()["state"] == pair.opt_d.state_dict()["state"] == {}  # fresh
    frozen = {id(p) for p in frozen_d_parameters(pair.D, 2)}
    named = dict(pair.D.named_parameters())
    assert {n for n, p in named.items() if id(p) in frozen} == set(FROZEN)
    assert all(p.requires_grad == (id(p) not in frozen) for p in named.values())


def test_group_batchnorm_made_anew_is_frozen_again():
    """--sync-bn replaces D's BatchNorm layers, and their parameters, before DDP wraps D."""
    cfg = dataclasses.replace(tiny(), init_from="start", freeze_d=2, sync_bn=True)
    pair = new_pair(PairSpec(cfg, make_tasks("per-class", (0,))[0], 1, 10), "cpu", "cpu")
    freeze(pair.D, 2)
    job = types.SimpleNamespace(cfg=cfg, group=types.SimpleNamespace(pg=None), devices=("cpu",) * 2)
    nets = group_nets(job)(pair)
    named = dict(nets.D.named_parameters())
    assert type(nets.D.model[6]).__name__ == "GroupBatchNorm2d"
    assert [n for n, p in named.items() if not p.requires_grad] == list(FROZEN)


def test_a_fine_tune_starts_from_the_start_trains_and_says_so(gan, digits_file, tmp_path):
    run = tmp_path / "run"
    assert _train(digits_file, run, gan) == 0
    start = read_start(gan)
    config = json.loads((run / "config.json").read_text())
    assert config["init_from"] == str(gan) and config["freeze_d"] == 0
    record = json.loads((run / "dataset.json").read_text())["start"]
    assert record["run"] == str(gan) and record["step"] == 4 and len(record["sha256"]) == 64
    for k in (0, 1, 2):
        state = _state(run, k)
        assert state["step"] == 6
        assert not torch.equal(state["D"]["model.0.weight"], start.D["model.0.weight"])  # trained
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "export")]) == 0
    card = (tmp_path / "export" / "README.md").read_text()
    assert f"started from the final weights of the gan run `{gan}` (step 4, " in card
    assert "(--init-from); nothing frozen (--freeze-d 0)." in card


# ---- the contracts -------------------------------------------------------------------------


@pytest.mark.mpi
def test_a_class_fine_tuned_on_5_ranks_has_the_weights_it_has_on_1(gan, digits_file, tmp_path):
    args = ("--classes", "0", "1", "2", "3", "4", "--init-from", str(gan), "--freeze-d", "1")
    args += ("--threads", "1", "--fuse", "1")
    one = run_cli(*tiny_args(digits_file, tmp_path / "one", *args))
    assert one.returncode == 0, one.stderr
    five = run_cli(*tiny_args(digits_file, tmp_path / "five", *args), ranks=5)
    assert five.returncode == 0, five.stderr
    _same_checkpoints(tmp_path / "one", tmp_path / "five", classes=range(5))


@pytest.mark.parametrize(("freeze", "schedule"), [("0", "sync"), ("2", "sync"), ("2", "async")])
def test_a_fused_fine_tune_has_the_weights_of_one_alone(
    gan, digits_file, tmp_path, exact_cpu, freeze, schedule
):
    how = ("--freeze-d", freeze, "--schedule", schedule)
    assert _train(digits_file, tmp_path / "alone", gan, "--fuse", "1", *how) == 0
    assert _train(digits_file, tmp_path / "fused", gan, "--fuse", "3", *how) == 0
    _same_checkpoints(tmp_path / "alone", tmp_path / "fused")
    start = read_start(gan)
    for k in (0, 1, 2):
        D = _state(tmp_path / "fused", k)["D"]
        kept = {n for n in D if n in start.D and torch.equal(D[n], start.D[n])}
        assert kept == (set(FROZEN) if freeze == "2" else set()), k
        frozen_adam = len(_state(tmp_path / "fused", k)["opt_d"]["state"])
        assert frozen_adam == 16 - len(kept)  # Adam keeps nothing of a frozen parameter


@pytest.mark.mpi
@pytest.mark.parametrize("sync_bn", ["--no-sync-bn", "--sync-bn"])
def test_a_data_parallel_group_leaves_the_frozen_blocks_as_the_start_left_them(
    gan, digits_file, tmp_path, sync_bn
):
    args = ("--classes", "0", "--init-from", str(gan), "--freeze-d", "2", "--threads", "1")
    args += (sync_bn,)  # --sync-bn makes D's BatchNorm layers anew (groupbn.convert)
    done = run_cli(*tiny_args(digits_file, tmp_path / "run", *args), ranks=2)
    assert done.returncode == 0, done.stderr
    replicas = [e for e in events(done.stdout) if e["event"] == "replica"]
    assert len(replicas) == 2 and replicas[0]["group_rank"] != replicas[1]["group_rank"]
    assert replicas[0]["d_sha256"] == replicas[1]["d_sha256"]
    D, start = _state(tmp_path / "run", 0)["D"], read_start(gan).D
    assert all(torch.equal(D[n], start[n]) for n in FROZEN)
    assert not torch.equal(D["model.7.weight"], start["model.7.weight"])  # block 3 trains
    frozen = list(_state(tmp_path / "run", 0)["opt_d"]["state"])
    assert 0 not in frozen and 4 not in frozen  # no Adam state for model.0 or model.6


def test_a_resumed_fine_tune_is_the_uninterrupted_one(gan, digits_file, tmp_path, exact_cpu):
    straight, parts, stopped = tmp_path / "straight", tmp_path / "parts", tmp_path / "stopped"
    assert _train(digits_file, straight, gan, "--freeze-d", "1") == 0
    assert _train(digits_file, parts, gan, "--freeze-d", "1", "--steps", "3") == 0
    assert main(["train", "--run", str(parts), "--resume", "--steps", "6", "--no-progress"]) == 0
    _same_checkpoints(straight, parts)
    # A stop signal at class 1's step 2: class 2 has not begun, and begins from the start on
    # --resume.
    assert _train(digits_file, stopped, gan, "--freeze-d", "1", "--inject-fault", "term:1:2") == 75
    assert not (stopped / "class_002" / "checkpoint.pt").exists()
    assert main(["train", "--run", str(stopped), "--resume", "--no-progress"]) == 0
    _same_checkpoints(straight, stopped)


@pytest.mark.parametrize("fuse", ["1", "3"])
def test_a_nan_before_the_first_checkpoint_rolls_back_to_the_start(
    gan, digits_file, tmp_path, exact_cpu, capsys, fuse
):
    run = tmp_path / "run"
    capsys.readouterr()
    fault = ("--inject-fault", "nan:1:1", "--freeze-d", "2", "--fuse", fuse)
    assert _train(digits_file, run, gan, *fault) == 0
    rollbacks = [e for e in events(capsys.readouterr().out) if e["event"] == "rollback"]
    assert [(e["class_id"], e["back_to"]) for e in rollbacks] == [(1, 0)]
    state, start = _state(run, 1), read_start(gan)
    assert state["step"] == 6 and state["retries"] == 1
    # Its frozen blocks are the start's (a fresh initialisation would have left its own).
    assert all(torch.equal(state["D"][n], start.D[n]) for n in FROZEN)
    assert all(torch.isfinite(t).all() for t in state["D"].values())


# ---- refusals ------------------------------------------------------------------------------


def test_each_bad_setting_is_refused_in_one_line(gan, digits_file, tmp_path, capsys):
    def refused(*extra) -> str:
        return _refusal(capsys, *tiny_args(digits_file, tmp_path / "run", *extra))

    assert refused("--mode", "gan", "--init-from", str(gan)) == (
        "distcgan: error: --init-from starts the pairs of --mode per-class, not --mode gan: "
        "drop --init-from, or train with --mode per-class"
    )
    assert refused("--init-from", str(gan), "--freeze-d", "-1") == (
        "distcgan: error: freeze_d must be >= 0 (0: nothing frozen), got -1"
    )
    assert refused("--freeze-d", "2") == (
        "distcgan: error: --freeze-d 2 keeps D's first blocks as a start left them, and this "
        "run has no start: add --shared-steps S (a shared phase first) or --init-from RUN (a "
        "finished --mode gan run), or drop --freeze-d"
    )
    assert refused("--init-from", str(gan), "--freeze-d", "5") == (
        "distcgan: error: --freeze-d 5 is beyond D's depth: D has 4 blocks before its output "
        "layer; freeze 0 (none) to 4"
    )
    assert refused("--init-from", str(tmp_path / "nothing")).startswith(
        f"distcgan: error: --init-from {tmp_path / 'nothing'} does not exist: give the run "
        "directory"
    )
    assert refused("--init-from", str(gan), "--z-dim", "64").startswith(
        f"distcgan: error: --init-from {gan} is a gan run of another architecture (z_dim 100 "
        "there, 64 here): start from a gan run of this run's data and preset: python -m "
        "distcgan train --mode gan"
    )
    assert not (tmp_path / "run").exists()


def test_a_resume_from_a_start_that_changed_is_refused(gan, digits_file, tmp_path, capsys):
    start, run = tmp_path / "gan", tmp_path / "run"
    shutil.copytree(gan, start)
    assert (
        main(
            tiny_args(
                digits_file,
                run,
                "--init-from",
                str(start),
                "--classes",
                "0",
                "--steps",
                "3",
                "--threads",
                "1",
            )
        )
        == 0
    )
    more = run_cli("train", "--run", str(start), "--resume", "--steps", "6", "--no-progress")
    assert more.returncode == 0, more.stderr
    said = _refusal(capsys, "train", "--run", str(run), "--resume", "--steps", "6")
    assert said == (
        f"distcgan: error: --init-from {start} now holds other weights (step 6) than the run in "
        f"{run} started from (step 4): resume with the gan run as it was, or train anew from "
        f"this one: python -m distcgan train --config {run}/config.json --run {run}-2"
    )
    # That command trains.
    assert main([*said.split(": ")[-1].split()[3:], "--steps", "1", "--no-progress"]) == 0
    assert json.loads((tmp_path / "run-2" / "config.json").read_text())["init_from"] == str(start)
