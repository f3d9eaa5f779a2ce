"""Data-parallel training (gan, cgan, and per-class class groups) under real mpiexec: replicas
stay bit-identical, 2 ranks x 32 match 1 rank x 64, and resume is exact."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import events, run_cli, tiny_args

from distcgan.report import draw
from distcgan.report.page import write_report
from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi


def _replicas(stdout):
    return [e for e in events(stdout) if e["event"] == "replica"]


@pytest.mark.parametrize("mode", ["gan", "cgan"])
def test_every_rank_of_a_group_holds_the_same_weights(tmp_path, digits_file, mode):
    run = tmp_path / "run"
    result = run_cli(
        *tiny_args(digits_file, run, "--mode", mode, "--classes", "0", "1", "2", "--steps", "5"),
        ranks=2,
    )
    assert result.returncode == 0, result.stderr
    replicas = _replicas(result.stdout)
    assert sorted(r["group_rank"] for r in replicas) == [0, 1]
    assert len({(r["g_sha256"], r["d_sha256"]) for r in replicas}) == 1
    summary = json.loads((run / "summary.json").read_text())
    [task] = summary["classes"]
    assert task["task"] == "all" and task["ranks"] == [0, 1] and task["effective_batch"] == 32
    state = read(run / "all" / "checkpoint.pt")
    assert state["arch"] == [100, 1, 16, 10 if mode == "cgan" else 0]
    if mode == "cgan":  # G takes z + a 10-d label embedding; D gets 10 one-hot label maps
        assert state["G"]["l1.weight"].shape[1] == 110
        assert state["D"]["model.0.weight"].shape[1] == 1 + 10


def test_two_ranks_of_32_match_one_rank_of_64(tmp_path, digits_file):
    # The same global batch (64) and samples on both (no sharding); BatchNorm over the group;
    # no dropout (its masks depend on the local batch shape).
    common = [
        "--mode",
        "gan",
        "--classes",
        "0",
        "1",
        "2",
        "3",
        "--steps",
        "6",
        "--global-batch-size",
        "64",
        "--sync-bn",
        "--no-data-shard",
        "--d-dropout",
        "0",
        "--ema-decay",
        "0",
        "--devices",
        "cpu",
        "--threads",
        "1",
    ]
    one, two = tmp_path / "one", tmp_path / "two"
    r1 = run_cli(*tiny_args(digits_file, one, *common), ranks=1)
    r2 = run_cli(*tiny_args(digits_file, two, *common), ranks=2)
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr + r2.stderr
    # The loss curves agree to float rounding...
    curves = [
        [json.loads(x) for x in (r / "all" / "metrics.jsonl").read_text().splitlines()]
        for r in (one, two)
    ]
    for m1, m2 in zip(*curves):
        for key in ("loss_d", "loss_g", "d_real", "d_fake"):
            assert abs(m1[key] - m2[key]) < 1e-5, (m1["step"], key, m1[key], m2[key])
    # ...and so do the weights: Adam turns rounding-level gradient differences into updates of
    # up to its learning rate where a gradient is near zero, so compare relative L2 distances.
    a, b = (read(r / "all" / "checkpoint.pt") for r in (one, two))
    for net in ("G", "D"):
        keys = [k for k in a[net] if a[net][k].is_floating_point()]
        diff = sum((a[net][k] - b[net][k]).pow(2).sum() for k in keys).sqrt()
        norm = sum(a[net][k].pow(2).sum() for k in keys).sqrt()
        assert diff / norm < 1e-3, (net, float(diff / norm))
    # --sync-bn's BatchNorm layers train: every parameter Adam was given has its state.
    for state in (a, b):
        for opt in ("opt_g", "opt_d"):
            given = [i for group in state[opt]["param_groups"] for i in group["params"]]
            assert sorted(state[opt]["state"]) == sorted(given), opt


def test_class_groups_when_ranks_outnumber_classes(tmp_path, digits_file, monkeypatch):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--classes", "0", "1", "--steps", "4"), ranks=3)
    assert result.returncode == 0, result.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert [(c["task"], c["ranks"]) for c in summary["classes"]] == [
        ("class_000", [0, 1]),
        ("class_001", [2]),
    ]
    replicas = _replicas(result.stdout)
    assert len(replicas) == 2 and replicas[0]["g_sha256"] == replicas[1]["g_sha256"]
    # The report's timeline draws a group's class on each of its ranks (its lines are rank 0's).
    drawn = []
    monkeypatch.setattr(draw, "figure", lambda fig, tight=True: drawn.append(fig) or "")
    write_report(run)
    [timeline] = [f.axes[0] for f in drawn if "seconds since" in f.axes[0].get_xlabel()]
    labels = sorted((t.get_text(), t.get_position()[1]) for t in timeline.texts)
    assert labels == [("000", 0), ("000", 1), ("001", 2)]


def test_resume_of_a_data_parallel_run_is_exact(tmp_path, digits_file):
    common = [
        "--mode",
        "cgan",
        "--classes",
        "0",
        "1",
        "--checkpoint-every",
        "4",
        "--devices",
        "cpu",
        "--threads",
        "1",
    ]
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert (
        run_cli(*tiny_args(digits_file, straight, *common, "--steps", "8"), ranks=2).returncode == 0
    )
    assert (
        run_cli(*tiny_args(digits_file, halves, *common, "--steps", "4"), ranks=2).returncode == 0
    )
    again = run_cli(
        "train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress", ranks=2
    )
    assert again.returncode == 0, again.stderr
    a, b = (read(r / "all" / "checkpoint.pt") for r in (straight, halves))
    assert a["step"] == b["step"] == 8
    for net in ("G", "D"):
        assert all(torch.equal(a[net][k], b[net][k]) for k in a[net]), net


@pytest.mark.launcher_neutral
def test_gradient_accumulation_equals_the_same_micro_batches_on_two_ranks(tmp_path, digits_file):
    # What accumulation must equal: one rank taking a batch of 32 as 2 micro-batches of 16 does
    # what 2 ranks of 16 do, each normalising its own 16 in BatchNorm, their gradients averaged
    # (the same rows and noise: --no-data-shard). Adam hides a wrong loss scale in the weights
    # (it divides the gradient by its own size), so its first moment is compared too: summing
    # the micro-batches' gradients instead of averaging them doubles it.
    common = "--mode gan --classes 0 1 2 --steps 4 --global-batch-size 32 --no-data-shard".split()
    common += ["--d-dropout", "0", "--ema-decay", "0", "--devices", "cpu", "--threads", "1"]
    ranks, accum = tmp_path / "ranks", tmp_path / "accum"
    two = run_cli(*tiny_args(digits_file, ranks, *common), ranks=2)
    assert two.returncode == 0, two.stderr
    one = run_cli(*tiny_args(digits_file, accum, *common, "--grad-accum", "2"), ranks=1)
    assert one.returncode == 0, one.stderr
    a, b = (read(r / "all" / "checkpoint.pt") for r in (ranks, accum))
    assert a["step"] == b["step"] == 4 and int(b["opt_g"]["state"][0]["step"]) == 4
    for net, opt in (("G", "opt_g"), ("D", "opt_d")):
        # BatchNorm's running statistics are not compared: a rank's are its own micro-batch's,
        # and accumulation updates them once a micro-batch.
        params = [k for k in a[net] if "running_" not in k and "num_batches" not in k]
        for k in params:
            torch.testing.assert_close(b[net][k], a[net][k], rtol=1e-4, atol=1e-6, msg=k)
        for i, state in a[opt]["state"].items():
            for moment in ("exp_avg", "exp_avg_sq"):
                got, want = b[opt]["state"][i][moment], state[moment]
                torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-9, msg=f"{net} {i}")


def test_a_data_parallel_run_logs_more_often_than_mpi_has_user_operations(tmp_path, digits_file):
    # The group's metrics are averaged at every log step; a user-defined MPI op made per call
    # (never freed) ended runs after about 30 log steps with "too many user-defined reduction
    # operations".
    run = tmp_path / "run"
    args = ["--mode", "gan", "--classes", "0", "1", "--steps", "40", "--log-every", "1"]
    result = run_cli(*tiny_args(digits_file, run, *args), ranks=2)
    assert result.returncode == 0, result.stderr
    lines = (run / "all" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == list(range(1, 41))


@pytest.mark.launcher_neutral
def test_a_finished_data_parallel_task_resumed_is_reported_once(tmp_path, digits_file):
    # Resumed after it finished, the task is not retrained, and only the group's first rank
    # reports it (every rank of the group did, and summary.json listed it once per rank).
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--mode", "gan", "--classes", "0", "1", "--steps", "2")
    assert run_cli(*args, "--devices", "cpu", "--threads", "1", ranks=2).returncode == 0
    again = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert again.returncode == 0, again.stderr
    summary = json.loads((run / "summary.json").read_text())
    rows = [(c["task"], c["status"], c["ranks"], c["steps"]) for c in summary["classes"]]
    assert rows == [("all", "done", [0, 1], 2)]
    assert summary["complete"] and "class_start" not in again.stdout
