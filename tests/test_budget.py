"""The comparison's budgets (compare --budget images|steps|time) and what they rest on: train's
--time-limit-s (a pair done at its first log step past its seconds) and --score-every (scores
during training), each on the tiny preset; a time-budget comparison under real `mpiexec -n 2`
that --resume continues without retraining what finished."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import events, run_cli, save_tiny, tiny_args

from distcgan.cli import main
from distcgan.compare.experiment import VARIANTS, variant_configs
from distcgan.config import tiny
from distcgan.options import CompareOptions
from distcgan.plan import equal_budget, plan_budgets

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


def test_each_rule_gives_each_variant_its_steps_and_seconds():
    counts = [100, 50, 25, 25]
    images = plan_budgets("images", counts, 10, 8, 0.0, ranks=3)
    assert images == equal_budget(counts, 10, 8)
    steps = plan_budgets("steps", counts, 10, 8, 0.0, ranks=3)
    assert {m: (b.pairs, b.steps) for m, b in steps.items()} == {
        "per-class": (4, 10),
        "gan": (1, 10),
        "cgan": (1, 10),
    }
    assert steps["per-class"].images_seen == 4 * steps["gan"].images_seen
    # Time: 4 classes on 3 ranks are 2, 1 and 1 pairs: each pair gets half the seconds, so the
    # busiest rank spends them all, as gan's and cgan's one pair does on every rank. The steps
    # stay the images rule's, as a cap.
    timed = plan_budgets("time", counts, 10, 8, 60.0, ranks=3)
    assert {m: (b.steps, b.pair_s) for m, b in timed.items()} == {
        "per-class": (10, 30.0),
        "gan": (40, 60.0),
        "cgan": (40, 60.0),
    }
    assert plan_budgets("time", counts, 10, 8, 60.0, ranks=8)["per-class"].pair_s == 60.0
    for rule, seconds in (("time", 0.0), ("epochs", 1.0)):
        with pytest.raises(ValueError):
            plan_budgets(rule, counts, 10, 8, seconds, ranks=1)


def test_a_variant_config_carries_its_budget():
    opts = CompareOptions(out="x", budget="time", budget_s=12.0)
    per_class, gan, cgan = variant_configs(tiny(), [10, 10], opts, ranks=1)
    assert (per_class.cfg.time_limit_s, per_class.cfg.steps) == (6.0, 6)
    assert (gan.cfg.time_limit_s, gan.cfg.steps) == (12.0, 12)
    opts = CompareOptions(out="x", budget="steps")
    assert [v.cfg.steps for v in variant_configs(tiny(), [10, 10], opts, 1)] == [6, 6, 6]
    assert all(v.cfg.time_limit_s == 0 for v in variant_configs(tiny(), [10, 10], opts, 1))


def test_a_time_limit_ends_a_pair_at_the_step_past_it_and_resume_does_not_retrain_it(
    tmp_path, digits_file, capsys
):
    # No log step comes before the time is up (every 5,000 steps): the time is looked at after
    # the first step and where the pace foretells its end, not at the next log step.
    run = tmp_path / "run"
    base = tiny_args(digits_file, run, "--classes", "0", "--log-every", "5000")
    args = [*base, "--checkpoint-every", "5000", "--steps", "100000"]
    assert main([*args, "--time-limit-s", "0.5"]) == 0
    said = events(capsys.readouterr().out)
    [up] = [e for e in said if e["event"] == "time_up"]
    [row] = json.loads((run / "summary.json").read_text())["classes"]
    assert row["status"] == "done" and row["time_up"] is True
    assert row["steps"] == up["step"] and 0 < row["steps"] < 5000
    assert row["train_s"] >= 0.5
    # Its last interval is written at that step (a NaN in it would have been rolled back).
    lines = (run / "class_000" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [row["steps"]]
    # The checkpoint and the last grid are at that step; sample takes the pair as finished.
    assert (run / "class_000" / f"samples_step{row['steps']:07d}.png").is_file()
    out = tmp_path / "s.h5"
    assert main(["sample", "--run", str(run), "--per-class", "4", "--out", str(out)]) == 0
    # --resume: the time is spent (it is in the checkpoint), so nothing trains again.
    assert main([*args, "--time-limit-s", "0.5", "--resume"]) == 0
    assert not [e for e in events(capsys.readouterr().out) if e["event"] == "class_start"]
    assert len((run / "class_000" / "metrics.jsonl").read_text().splitlines()) == len(lines)
    # More seconds on --resume: it continues from that step (here to a few more steps).
    more = ["--time-limit-s", "1000", "--steps", str(row["steps"] + 4), "--resume"]
    assert main([*base, "--checkpoint-every", "1000", *more]) == 0
    [start] = [e for e in events(capsys.readouterr().out) if e["event"] == "class_start"]
    assert start["start_step"] == row["steps"]
    [row] = json.loads((run / "summary.json").read_text())["classes"]
    assert row["steps"] == start["start_step"] + 4 and row["time_up"] is False


def test_without_a_limit_the_row_says_nothing_of_time(tmp_path, digits_file):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0")) == 0
    [row] = json.loads((run / "summary.json").read_text())["classes"]
    assert row["time_up"] is None and row["steps"] == 6


def _weights(run, task="class_000"):
    from distcgan.run import checkpoint

    return checkpoint.load_latest(run / task, log=lambda m: None)["G"]


@pytest.mark.parametrize("mode", ["per-class", "cgan", "gan"])
def test_scores_during_training_are_metrics_lines_and_change_no_weight(tmp_path, digits_file, mode):
    net = save_tiny(tmp_path / "net.pt")
    base = ["--mode", mode, "--classes", "0", "1", "--steps", "8", "--log-every", "2"]
    plain, scored = tmp_path / "plain", tmp_path / "scored"
    assert main(tiny_args(digits_file, plain, *base)) == 0
    extra = ["--score-every", "4", "--score-n", "40", "--score-network", str(net)]
    assert main(tiny_args(digits_file, scored, *base, *extra)) == 0
    task = "class_000" if mode == "per-class" else "all"
    lines = [json.loads(x) for x in (scored / task / "metrics.jsonl").read_text().splitlines()]
    with_score = [x["step"] for x in lines if "score_fid" in x]
    assert with_score == [4, 8]  # every 4 steps, on log steps
    last = lines[-1]
    assert math.isfinite(last["score_fid"]) and last["score_fid"] >= 0
    for key in ("score_precision", "score_recall"):
        assert 0 <= last[key] <= 1
    # A gan G's draws have no class: no class accuracy; the others have one.
    assert ("score_accuracy" in last) == (mode != "gan")
    assert last["score_n"] == 40 and last["score_s"] >= 0
    # The pooled FID, a gan pair's own measure, on every pair: a cgan's two classes' draws
    # together against their pooled statistics, not the mean of its per-class FIDs.
    assert math.isfinite(last["score_fid_pooled"]) and last["score_fid_pooled"] >= 0
    if mode == "cgan":
        assert last["score_fid_pooled"] != pytest.approx(last["score_fid"])
    else:  # per-class: one class; gan: its FID is the pooled one
        assert last["score_fid_pooled"] == last["score_fid"]
    # Scoring draws from no stream of the pair and restores G's mode: the same weights.
    a, b = _weights(plain, task), _weights(scored, task)
    assert all(torch.equal(a[k], b[k]) for k in a)
    # summary.json's rows time what training leaves out: the scores, checkpoints and grids.
    for run in (plain, scored):
        row = next(r for r in json.loads((run / "summary.json").read_text())["classes"])
        assert row["checkpoints"] == 3  # steps 3, 6 and 8: tiny's checkpoint_every 3, the last
        assert row["grids"] == len(list((run / task).glob("samples_step*.png"))) == 1
        assert row["checkpoint_s"] > 0 and row["grid_s"] > 0
        assert (row["score_s"] > 0) == (run == scored)
    # The report draws them.
    assert main(["report", "--run", str(scored)]) == 0
    assert "Scores during training" in (scored / "report.html").read_text()


def _compare(data, out, *extra):
    return ["compare", "--preset", "tiny", "--data", str(data), "--out", str(out), *extra]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--budget", "epochs"], "argument --budget: invalid choice: 'epochs' (choose from"),
        (["--budget", "time"], "--budget time needs --budget-s SECONDS > 0"),
        (["--budget-s", "30"], "--budget-s goes with --budget time, not --budget images"),
        (["--time-limit-s", "3"], "compare sets each pair's --time-limit-s from --budget time"),
    ],
)
def test_bad_budgets_are_one_line_and_exit_2(tmp_path, digits_file, capsys, extra, message):
    out = tmp_path / "cmp"
    net = save_tiny(tmp_path / "net.pt")
    assert main(_compare(digits_file, out, "--network", str(net), *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--score-every", "3", "--log-every", "2"], "score_every 3 must be 0 or a multiple of"),
        (["--score-every", "2"], "--score-every needs --score-network"),
        (["--score-every", "2", "--score-network", "missing.pt"], "missing.pt: no such file"),
        (["--time-limit-s", "-1"], "time_limit_s must be >= 0"),
        (["--score-n", "5"], "score_n must be >= 10 samples"),
    ],
)
def test_bad_training_scores_and_limits_are_one_line(tmp_path, digits_file, capsys, extra, message):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not run.exists()


def test_the_steps_budget_trains_every_pair_the_same_steps(tmp_path, digits_file, capsys):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "--steps", "4", "--budget", "steps")
    args += ["--network", str(net), "--n", "20", "--splits", "2", "--no-real", "--no-progress"]
    assert main([*args, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert "budget steps: the same steps per model" in plan and not out.exists()
    assert "\ntraining: the preset `tiny`, as it is\n" in plan
    assert main(args) == 0
    doc = json.loads((out / "compare.json").read_text())
    assert doc["budget"]["name"] == "steps" and doc["budget"]["seconds"] is None
    rows = doc["variants"]
    assert {v: rows[v]["steps_reached"] for v in VARIANTS} == {v: 4 for v in VARIANTS}
    # No scores during training: no variant's score fields are scaled (compare scales them only
    # to score every variant alike).
    for v in VARIANTS:
        stored = json.loads((out / v / "config.json").read_text())
        assert (stored["score_every"], stored["score_n"]) == (0, 2000), v
    assert rows["per-class"]["images_seen"] == 2 * rows["gan"]["images_seen"] == 2 * 4 * 16
    for row in rows.values():
        assert row["device_unit"] == "core" and row["device_s"] >= row["train_s"] > 0
        assert row["time_up"] == 0 and row["pair_s"] == 0
    table = (out / "compare.md").read_text()
    assert "| steps | images seen | train s | core s |" in table
    assert "Budget: the same steps per model" in table
    # --resume cannot change the rule.
    again = ["compare", "--out", str(out), "--resume", "--budget", "images", "--no-progress"]
    assert main(again) == 2
    assert "--resume cannot change --budget (steps -> images)" in capsys.readouterr().err
    # A comparison started before --budget existed was under the images rule.
    options = out / "compare-options.json"
    stored = json.loads(options.read_text())
    del stored["budget"], stored["budget_s"]
    options.write_text(json.dumps(stored))
    assert main([*again[:-2], "steps", "--no-progress"]) == 2
    assert "--resume cannot change --budget (images -> steps)" in capsys.readouterr().err


def _scored_steps(run, task):
    lines = [json.loads(x) for x in (run / task / "metrics.jsonl").read_text().splitlines()]
    return [(x["step"], x["score_n"]) for x in lines if "score_fid" in x]


def test_a_comparison_scores_every_variant_at_equal_images_on_equal_samples_a_class(
    tmp_path, digits_file, capsys
):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "--steps", "4", "--log-every", "2")
    args += ["--score-every", "2", "--score-n", "20", "--network", str(net)]
    args += ["--n", "20", "--splits", "2", "--no-real", "--no-progress"]
    # The steps rule: every pair trains 4 steps, so every pair is scored every 2 of them.
    assert main([*args, "--budget", "steps", "--dry-run"]) == 0
    rows = [r.split() for r in capsys.readouterr().out.splitlines()[1:5]]
    assert rows[0][-3:-1] == ["score_every", "score_n"]
    assert {r[0]: r[-3:-1] for r in rows[1:]} == {
        "per-class": ["2", "20"],
        "gan": ["2", "40"],
        "cgan": ["2", "40"],
    }
    # The images rule: gan and cgan train 2 x 4 steps, scored every 2 x 2 on 20 images a class.
    assert main(args) == 0
    assert _scored_steps(out / "per-class", "class_000") == [(2, 20), (4, 20)]
    assert _scored_steps(out / "per-class", "class_001") == [(2, 20), (4, 20)]
    for mode in ("gan", "cgan"):
        assert _scored_steps(out / mode, "all") == [(4, 40), (8, 40)], mode


@pytest.mark.mpi
def test_a_time_budget_comparison_on_two_ranks_and_its_resume(tmp_path, digits_file):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "2", "--steps", "100000")
    args += ["--budget", "time", "--budget-s", "2", "--log-every", "2", "--network", str(net)]
    args += ["--checkpoint-every", "1000"]
    args += ["--n", "30", "--splits", "2", "--no-real", "--no-progress", "--variants"]
    first = run_cli(*args, "per-class", "gan", ranks=2)
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / "compare.json").read_text())
    assert doc["budget"]["name"] == "time" and doc["budget"]["seconds"] == 2
    rows = doc["variants"]
    # 3 classes on 2 ranks: rank 0 trains 2, so each pair gets 1 s; gan's one pair, 2 s.
    assert (rows["per-class"]["pair_s"], rows["gan"]["pair_s"]) == (1.0, 2.0)
    assert rows["per-class"]["time_up"] == 3 and rows["gan"]["time_up"] == 1
    for row in rows.values():
        lo, hi = row["steps_reached_range"]
        assert 1 <= lo <= hi < row["steps"]
        assert row["images_seen"] == round(row["steps_reached"] * row["pairs"]) * 16
    # The group of gan's two ranks stopped together: both say so, at the same step.
    stops = [e for e in events(first.stdout) if e["event"] == "time_up" and e["task"] == "all"]
    assert len(stops) == 2 and stops[0]["step"] == stops[1]["step"]
    assert "of 100,000 per class (3 pairs)" in (out / "compare.md").read_text()

    # --resume adds cgan: per-class and gan, finished by their time, are not trained again.
    checkpoints = {p: p.stat().st_mtime_ns for p in out.rglob("*.pt") if p.name != "net.pt"}
    again = run_cli("compare", "--out", str(out), "--resume", "--no-progress", "--variants",
                    *VARIANTS, ranks=2)  # fmt: skip
    assert again.returncode == 0, again.stderr
    starts = [e for e in events(again.stdout) if e["event"] == "class_start"]
    assert {e["task"] for e in starts} == {"all"} and again.stdout.count("scored already") == 2
    assert {p: p.stat().st_mtime_ns for p in checkpoints} == checkpoints
    cgan = json.loads((out / "compare.json").read_text())["variants"]["cgan"]
    assert cgan["time_up"] == 1 and cgan["pair_s"] == 2.0


def test_a_budget_shorter_than_one_logged_step_is_said(tmp_path, digits_file, capsys):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "--variants", "gan", "--steps", "1000")
    args += ["--budget", "time", "--budget-s", "0.001", "--log-every", "50", "--network", str(net)]
    args += ["--checkpoint-every", "1000"]
    assert main([*args, "--n", "20", "--splits", "2", "--no-real", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "shorter than one logged step (1 step(s) took" in err[0], err


def test_the_time_plan_is_printed_by_dry_run(tmp_path, digits_file, capsys):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "2", "--budget", "time")
    args += ["--augment", "color", "--d-bn-eps", "0.5"]
    assert main([*args, "--budget-s", "90", "--network", str(net), "--dry-run"]) == 0
    plan = capsys.readouterr().out
    # the options every variant trains with over its preset, as compare.md will say them
    assert "\ntraining: the preset `tiny`, with d_bn_eps 0.5, augment color\n" in plan
    assert "budget time: the same training seconds on the same ranks" in plan
    assert "every variant trains 90 s of steps" in plan
    per_class = next(line.split() for line in plan.splitlines() if line.startswith("per-class"))
    # one rank: its three pairs share the 90 s; gan's one pair has them all.
    assert per_class[1:4] == ["3", "6", "30"]
    gan = next(line.split() for line in plan.splitlines() if line.startswith("gan"))
    assert gan[1:4] == ["1", "18", "90"]
    assert not out.exists()


def test_the_learning_curve_script_reads_the_scores_at_equal_images_seen(tmp_path, digits_file):
    import subprocess
    import sys

    from helpers import REPO

    net = save_tiny(tmp_path / "net.pt")
    extra = ["--score-every", "2", "--score-n", "20", "--score-network", str(net)]
    for mode, steps in (("per-class", "4"), ("cgan", "8")):  # 2 classes: cgan trains 2 x 4
        run = tmp_path / "cmp" / mode
        args = ["--mode", mode, "--classes", "0", "1", "--steps", steps, "--log-every", "2"]
        assert main(tiny_args(digits_file, run, *args, *extra)) == 0
    script = REPO / "benchmarks" / "learning_curves.py"
    cmd = [sys.executable, str(script), str(tmp_path / "cmp"), "--points", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("| fraction of the budget | per-class FID | cgan FID |")
    curves = json.loads(out[-1])
    # per-class scored at steps 2, 4 of 4 and cgan at 2, 4, 6, 8 of 8: fractions of the budget
    assert list(curves["per-class"]) == ["0.5", "1.0"]
    assert list(curves["cgan"]) == ["0.25", "0.5", "0.75", "1.0"]
    assert out[2].startswith("| 0.5 | ") and "-" not in out[3].split("|")[2]
    # points that one decimal cannot tell apart get two
    out = subprocess.run([*cmd[:-1], "3"], capture_output=True, text=True, check=True).stdout
    assert [row.split(" |")[0] for row in out.splitlines()[2:5]] == ["| 0.33", "| 0.67", "| 1.00"]


def test_a_runs_cost_is_each_launchs_seconds_times_that_launchs_threads(
    tmp_path, digits_file, monkeypatch
):
    # A run resumed with other threads (a bigger node, or --threads changed) cost each launch's
    # training seconds times that launch's threads: not the total times the last launch's, which
    # compare said before 2026-11-28. The threads are fixed here, whatever cores the machine has.
    import distcgan.mpi.context as context
    from distcgan.compare.experiment import device_seconds
    from distcgan.run import checkpoint
    from distcgan.run.rundir import RunDir, TaskRow

    def launch(threads: int, steps: int, *extra: str) -> list[TaskRow]:
        monkeypatch.setattr(context, "threads_for_rank", lambda *a: (threads, None))
        args = tiny_args(digits_file, run, "--classes", "0", "1", "--steps", str(steps), *extra)
        args += ["--devices", "cpu"]  # core-seconds, on a machine with a GPU too
        assert main(args) == 0
        return RunDir(run).summary_rows()

    run = tmp_path / "run"
    first = launch(1, 30)
    for a in first:
        assert a.core_s == pytest.approx(a.train_s, abs=1e-3) and a.gpu_s == 0 and a.train_s > 0
    second = launch(3, 60, "--resume", "--allow-regroup")  # other threads: said, then allowed
    for a, b in zip(first, second):
        assert b.train_s > a.train_s and b.gpu_s == 0
        assert b.core_s == pytest.approx(a.core_s + 3 * (b.train_s - a.train_s), abs=5e-3)
    cost = device_seconds(second, RunDir(run).read_env())  # env.json says 3 threads
    assert cost == {"device_s": round(sum(b.core_s for b in second), 1), "device_unit": "core"}
    assert cost["device_s"] < 3 * sum(b.train_s for b in second) - sum(a.train_s for a in first)
    # A checkpoint from before the cost was kept: its seconds count at this launch's threads.
    for task in ("class_000", "class_001"):
        state = checkpoint.load_latest(run / task)
        del state["core_s"], state["gpu_s"], state["format_version"]
        checkpoint.save(run / task, state)
    third = launch(2, 70, "--resume", "--allow-regroup")
    for c in third:
        assert c.core_s == pytest.approx(2 * c.train_s, abs=5e-3)
