"""Every command after a two-phase run (`train --mode per-class --shared-steps S`, issue 81): the
run holds its shared phase in RUN/all/ (summary row "all", class_id None) beside its K classes.
`report` draws the shared phase's scores and losses first and each fine-tune's after them on one
axis of the run's steps, the boundary marked, and says what the shared phase cost; `export`
exports the K class generators (not all/'s) and its card says where they started; `sample`,
`evaluate` and `generate` see the K classes alone; `status` and `supervise` name the two phases.
One tiny run, in process."""

from __future__ import annotations

import json
import shutil
import sys

import pytest
import torch
from helpers import save_tiny, tiny_args

from distcgan.cli import main
from distcgan.data import read_info
from distcgan.report import draw, page
from distcgan.run import checkpoint
from distcgan.run.rundir import RunDir, images_seen, read_jsonl, slowest_rank_s
from distcgan.run.supervise import run_status, supervise

SHARED, STEPS, CLASSES = 6, 4, (0, 1, 2)


@pytest.fixture(scope="module")
def two_phase(tmp_path_factory, digits_file):
    """A two-phase run of classes 0-2 (6 shared steps, then 4 a class, D's first block frozen),
    scored every 2 steps with a tiny network (`net`)."""
    root = tmp_path_factory.mktemp("shared")
    net = save_tiny(root / "net.pt")
    run = root / "run"
    args = ["--classes", *map(str, CLASSES), "--steps", str(STEPS)]
    args += ["--shared-steps", str(SHARED), "--freeze-d", "1", "--log-every", "2"]
    args += ["--score-every", "2", "--score-n", "20", "--score-network", str(net)]
    args += ["--devices", "cpu", "--threads", "1"]
    assert main(tiny_args(digits_file, run, *args)) == 0
    return run, net


def _copy(run, tmp_path):
    """A copy of the run that a test may change."""
    return shutil.copytree(run, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))


# ---- report ---------------------------------------------------------------------------------


@pytest.fixture
def figures(monkeypatch):
    """The report's figures as matplotlib drew them, by the heading of their kind."""
    drawn = []

    def keep(fig, tight=True):
        drawn.append(fig)
        return ""

    monkeypatch.setattr(draw, "figure", keep)
    return drawn


def _axes(figures, title):
    return [ax for fig in figures for ax in fig.axes if ax.get_title() == title]


def _boundary(ax) -> list[float]:
    """The x of every vertical line across the whole axes (axvline)."""
    return [
        line.get_xdata()[0]
        for line in ax.get_lines()
        if len(set(line.get_xdata())) == 1 and list(line.get_ydata()) == [0, 1]
    ]


def test_the_score_curve_runs_across_both_phases(two_phase, tmp_path, figures):
    run = _copy(two_phase[0], tmp_path)
    page.write_report(run)
    [fid] = _axes(figures, "FID")
    shared = [x for x in read_jsonl(run / "all" / "metrics.jsonl") if "score_fid" in x]
    assert len(shared) >= 2
    lines = [(list(line.get_xdata()), list(line.get_ydata())) for line in fid.get_lines()]
    # the shared phase's own scores at its own steps, first
    assert ([x["step"] for x in shared], [x["score_fid"] for x in shared]) in lines
    # each class's after them, at S + its step
    for k in CLASSES:
        own = [x for x in read_jsonl(run / f"class_{k:03d}" / "metrics.jsonl") if "score_fid" in x]
        steps = [SHARED + x["step"] for x in own]
        assert min(steps) > SHARED and (steps, [x["score_fid"] for x in own]) in lines
    assert _boundary(fid) == [SHARED]
    assert "step of the run" in fid.get_xlabel()


def test_the_losses_show_the_shared_phase_before_each_class(two_phase, tmp_path, figures):
    run = _copy(two_phase[0], tmp_path)
    page.write_report(run)
    shared = read_jsonl(run / "all" / "metrics.jsonl")
    panels = {t: _axes(figures, t) for t in ("all", *(f"class_{k:03d}" for k in CLASSES))}
    assert panels.pop("all") == []  # the shared phase is no class's panel
    for task, [ax] in panels.items():
        xs = [list(line.get_xdata()) for line in ax.get_lines()]
        assert [x["step"] for x in shared] in xs  # its losses first
        own = read_jsonl(run / task / "metrics.jsonl")
        assert [SHARED + x["step"] for x in own] in xs
        assert _boundary(ax) == [SHARED]


def test_the_page_says_the_shared_phase_and_its_share_of_the_cost(two_phase, tmp_path):
    run = _copy(two_phase[0], tmp_path)
    html = page.write_report(run).read_text().replace("&#x27;", "'")
    rows = RunDir(run).summary_rows()
    [shared] = [r for r in rows if r.task == "all"]
    images, total = images_seen(shared), sum(images_seen(r) for r in rows)
    assert 0 < images < total
    said = "a shared phase of 6 steps (one DC-GAN on all 3 classes, data-parallel on 1 rank(s))"
    assert said in html
    assert f"{images:,} of the run's {total:,} images ({images / total:.0%})" in html
    assert f"{shared.train_s:.1f} of its {slowest_rank_s(rows):.1f} training seconds" in html
    assert "D's first 1 block(s) frozen (--freeze-d 1)" in html
    # the classes' table has the classes alone
    classes = html.split("<h2>Classes")[1].split("<h2>")[0]
    assert "alt='all " not in classes
    assert [f"class_{k:03d}" in classes for k in CLASSES] == [True] * 3
    # before the run's summary (while it trains) the page says the phase without its cost
    (run / "summary.json").unlink()
    html = page.write_report(run, overwrite=True).read_text()
    assert "a shared phase of 6 steps (one DC-GAN on all 3 classes)" in html


def test_a_shared_phase_stopped_by_a_signal_is_drawn_alone_until_the_classes_begin(
    digits_file, tmp_path, figures
):
    run = tmp_path / "stopped"
    args = ["--classes", *map(str, CLASSES), "--steps", str(STEPS), "--shared-steps", str(SHARED)]
    args += [
        "--log-every",
        "1",
        "--devices",
        "cpu",
        "--threads",
        "1",
        "--inject-fault",
        "term:-1:3",
    ]
    assert main(tiny_args(digits_file, run, *args)) == 75  # stopped in the shared phase
    [reached] = [r.steps for r in RunDir(run).summary_rows() if r.task == "all"]
    assert 0 < reached < SHARED
    html = page.write_report(run).read_text()
    assert f"a shared phase of {reached} of its {SHARED} steps (one DC-GAN on all 3" in html
    [ax] = _axes(figures, "all")  # its losses, in a panel of its own until a class has some
    steps = [x["step"] for x in read_jsonl(run / "all" / "metrics.jsonl")]
    assert steps[-1] == reached and steps in [list(line.get_xdata()) for line in ax.get_lines()]
    code, message = run_status(run)
    assert code == 75 and f"distcgan train --run {run} --resume" in message


def test_the_timeline_draws_the_shared_phase_on_every_rank_it_trained_on(
    two_phase, tmp_path, figures
):
    # Its metrics lines are its first rank's; summary.json says which ranks trained it (here
    # the row of a 1-rank run, told it had two).
    run = _copy(two_phase[0], tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    for row in summary["classes"]:
        if row["task"] == "all":
            row["ranks"] = [0, 1]
    (run / "summary.json").write_text(json.dumps(summary))
    html = page.write_report(run).read_text()
    assert "data-parallel on 2 rank(s)" in html
    [timeline] = [f.axes[0] for f in figures if "seconds since" in f.axes[0].get_xlabel()]
    assert [t.get_text() for t in timeline.get_yticklabels()] == ["rank 0", "rank 1"]
    labels = [(t.get_text(), t.get_position()[1]) for t in timeline.texts]
    assert ("all", 0) in labels and ("all", 1) in labels


# ---- export and its card --------------------------------------------------------------------


def test_the_export_holds_the_class_generators_and_says_where_they_started(two_phase, tmp_path):
    run, _ = two_phase
    out = tmp_path / "export"
    assert main(["export", "--run", str(run), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["kind"], config["class_ids"]) == ("per-class", list(CLASSES))
    from safetensors.torch import load_file

    stacked = load_file(str(out / "model.safetensors"))
    shared = checkpoint.read(run / "all" / "checkpoint.pt")["G_ema"]
    for i, k in enumerate(CLASSES):
        own = checkpoint.read(run / f"class_{k:03d}" / "checkpoint.pt")["G_ema"]
        assert torch.equal(stacked["l1.weight"][i], own["l1.weight"])
        assert not torch.equal(stacked["l1.weight"][i], shared["l1.weight"])
    card = (out / "README.md").read_text()
    assert (
        "Each class fine-tuned from a shared phase of 6 steps (one DC-GAN on all 3 classes, "
        "data-parallel on 1 rank(s))" in card
    )
    assert "(--shared-steps 6); D's first 1 block(s) kept frozen (--freeze-d 1)" in card
    assert "Mode per-class, 4 steps per G/D pair" in card
    assert "over every launch, the shared phase, then its classes, one after another: " in card
    # generate reads the export: the classes, and only they
    drawn = tmp_path / "g.h5"
    args = ["generate", "--model", str(out), "--class", "2", "--n", "3", "--out", str(drawn)]
    assert main(args) == 0
    assert read_info(str(drawn)).counts[2] == 3 and sum(read_info(str(drawn)).counts) == 3


def test_a_time_limited_cards_steps_are_the_pairs_not_the_shared_phases(two_phase, tmp_path):
    # With --time-limit-s the card says the steps each pair reached (summary.json's): the
    # shared phase's 6 are not a pair's.
    run = _copy(two_phase[0], tmp_path)
    config = json.loads((run / "config.json").read_text())
    limits = {"time_limit_s": 30.0, "shared_time_limit_s": 20.0}
    (run / "config.json").write_text(json.dumps({**config, **limits}))
    out = tmp_path / "export"
    assert main(["export", "--run", str(run), "--out", str(out)]) == 0
    card = (out / "README.md").read_text()
    assert "Mode per-class, 4 steps (its 30 s time limit) per G/D pair" in card
    assert "rank(s)) under its 20 s time limit (--shared-time-limit-s), trained first" in card


# ---- sample, evaluate, status, supervise ------------------------------------------------------


def test_sample_and_evaluate_see_the_classes_alone(two_phase, tmp_path):
    run, net = two_phase
    samples = tmp_path / "s.h5"
    args = ["sample", "--run", str(run), "--per-class", "5", "--out", str(samples)]
    assert main([*args, "--devices", "cpu", "--no-progress"]) == 0
    info = read_info(str(samples))
    assert [k for k, n in enumerate(info.counts) if n] == list(CLASSES)
    assert sum(info.counts) == 5 * len(CLASSES)
    out = tmp_path / "ev.json"
    args = ["evaluate", "--run", str(run), "--network", str(net), "--n", "30", "--splits", "2"]
    assert main([*args, "--json", str(out), "--devices", "cpu", "--no-progress"]) == 0
    ev = json.loads(out.read_text())
    ids = [str(k) for k in CLASSES]
    for key in ("per_class_fid", "per_class_precision", "per_class_recall"):
        assert sorted(ev[key]) == ids, key
    assert sorted(ev["class_accuracy"]["per_class"]) == ids
    assert [c["class_id"] for c in ev["classes"]] == list(CLASSES)


def test_status_names_the_shared_phase_beside_the_classes(two_phase, capsys):
    run, _ = two_phase
    code, message = run_status(run)
    assert code == 0
    assert message == f"{run}: complete, 4 task(s) done: the shared phase (all/) and 3 classes"
    assert main(["status", "--run", str(run)]) == 0
    assert f"{message} (exit 0)" in capsys.readouterr().out


# A launcher that records a launch whose tasks (the run's rows) all finished, then exits 1, as
# Open MPI's mpirun may for ranks that all exited 0 after a signal.
LAUNCHER = """
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
with open(run / "launches.jsonl", "a") as fh:
    fh.write("{}\\n")
summary = json.loads((run / "summary.json").read_text())
summary["launch"] = len((run / "launches.jsonl").read_text().splitlines())
(run / "summary.json").write_text(json.dumps(summary))
sys.exit(1)
"""


def test_supervise_says_the_two_phases_when_the_launcher_disagrees(two_phase, tmp_path, capsys):
    run = _copy(two_phase[0], tmp_path)
    assert supervise(run, [sys.executable, "-c", LAUNCHER, str(run)]) == 0
    err = capsys.readouterr().err
    assert "the launcher exited 1; the run directory says:" in err
    assert "complete, 4 task(s) done: the shared phase (all/) and 3 classes (exit 0)" in err
