"""`distcgan compare`'s fourth variant, shared-per-class (per-class pairs fine-tuned from one DC-GAN
trained on all the classes first, `train --shared-steps`): its budget under each rule, its run's
config, the refusals of --shared-fraction and --freeze-d, and a tiny comparison against per-class
under real `mpiexec -n 2` whose row counts the shared phase, and its --resume."""

from __future__ import annotations

import dataclasses
import json

import pytest
from helpers import events, run_cli, save_tiny
from PIL import Image

from distcgan.cli import main
from distcgan.compare.experiment import check_time_spent, variant_configs
from distcgan.compare.report import steps_cell
from distcgan.config import tiny
from distcgan.errors import UserError
from distcgan.options import CompareOptions
from distcgan.plan import plan_budgets, shared_budget
from distcgan.run.rundir import RunDir, slowest_rank_s

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")

SHARED = "shared-per-class"
COUNTS = [100, 50, 25, 25]  # K = 4 classes; on 3 ranks a rank holds at most 2 of them


def test_the_images_rule_gives_the_shared_variant_the_others_images():
    # S = 10, F = 0.25: s = F x S = 2.5, rounded half up to 3; the shared phase K x s = 12
    # steps, each class S - s = 7: (12 + 4 x 7) x 8 = 320 = K x S x B images, the others'.
    budgets = plan_budgets("images", COUNTS, 10, 8, 0.0, ranks=3, shared_fraction=0.25)
    b = budgets[SHARED]
    assert (b.shared_steps, b.pairs, b.steps, b.batch, b.shared_s, b.pair_s) == (12, 4, 7, 8, 0, 0)
    assert {m: x.images_seen for m, x in budgets.items()} == {m: 4 * 10 * 8 for m in budgets}
    assert b.epochs_per_image == budgets["per-class"].epochs_per_image == 320 / 200
    # The probe: 10 classes of 900 steps, half shared: 4,500 shared + 450 a class.
    probe = plan_budgets("images", [500] * 10, 900, 32, 0.0, ranks=1, shared_fraction=0.5)
    assert (probe[SHARED].shared_steps, probe[SHARED].steps) == (4500, 450)
    assert probe[SHARED].images_seen == probe["cgan"].images_seen == 9000 * 32
    # Without a fraction the three variants only, as before.
    assert list(plan_budgets("images", COUNTS, 10, 8, 0.0, ranks=3)) == ["per-class", "gan", "cgan"]


def test_the_steps_rule_gives_every_classs_g_s_steps_in_all():
    budgets = plan_budgets("steps", COUNTS, 10, 8, 0.0, ranks=3, shared_fraction=0.25)
    b = budgets[SHARED]
    assert (b.shared_steps, b.steps) == (3, 7)  # 3 shared + 7 a class = S = 10
    assert b.images_seen == (3 + 4 * 7) * 8 and budgets["per-class"].images_seen == 4 * 10 * 8
    assert {m: budgets[m].steps for m in ("per-class", "gan", "cgan")} == dict.fromkeys(
        ("per-class", "gan", "cgan"), 10
    )


def test_the_time_rule_gives_the_shared_phase_f_of_the_seconds_and_the_pairs_the_rest():
    budgets = plan_budgets("time", COUNTS, 10, 8, 60.0, ranks=3, shared_fraction=0.25)
    b = budgets[SHARED]
    # 15 s to the shared phase (at most its 12 images-rule steps); the other 45 s shared by a
    # rank's pairs as per-class's 60 s are: 2 pairs on the busiest rank, 22.5 s each, at
    # most 7 steps each.
    assert (b.shared_s, b.shared_steps, b.pair_s, b.steps) == (15.0, 12, 22.5, 7)
    assert budgets["per-class"].pair_s == 30.0 and budgets["gan"].pair_s == 60.0
    # 4 classes on 8 ranks: one pair a rank (a group of two), so the pairs get all 45 s.
    wide = plan_budgets("time", COUNTS, 10, 8, 60.0, ranks=8, shared_fraction=0.25)[SHARED]
    assert (wide.shared_s, wide.pair_s) == (15.0, 45.0)


def test_a_fraction_that_leaves_a_phase_no_step_is_refused_and_one_outside_0_1_is_a_bug():
    said = "--shared-fraction 0.01 of --steps 10 leaves no step to the shared phase"
    with pytest.raises(UserError, match=said):
        shared_budget("images", COUNTS, 10, 8, 0.01)
    with pytest.raises(UserError, match="leaves no step to each class"):
        shared_budget("steps", COUNTS, 10, 8, 0.99)
    for fraction in (0.0, 1.0, -0.1, 1.5):  # check_options refuses them first: a bug here
        with pytest.raises(ValueError):
            shared_budget("images", COUNTS, 10, 8, fraction)


def test_the_variants_config_is_a_per_class_run_with_its_shared_phase():
    opts = CompareOptions(out="x", variants=("per-class", "gan", SHARED), freeze_d=1)
    per_class, gan, shared = variant_configs(tiny(), [100, 50, 25], opts, ranks=2)
    # tiny: 6 steps a class at batch 16; F = 0.5 (the default): 3 shared a class.
    assert (shared.cfg.mode, shared.cfg.steps, shared.cfg.shared_steps) == ("per-class", 3, 9)
    assert (shared.cfg.global_batch_size, shared.cfg.freeze_d, shared.cfg.shared_time_limit_s) == (
        16,
        1,
        0.0,
    )
    # --freeze-d is the shared variant's alone.
    assert per_class.cfg.freeze_d == gan.cfg.freeze_d == 0 and per_class.cfg.shared_steps == 0
    timed = dataclasses.replace(opts, budget="time", budget_s=12.0, shared_fraction=0.25)
    _, _, shared = variant_configs(tiny(), [100, 50, 25], timed, ranks=2)
    # 3 s to the shared phase; 9 s to the classes, 2 of them on rank 0: 4.5 s each.
    assert (shared.cfg.shared_time_limit_s, shared.cfg.time_limit_s) == (3.0, 4.5)
    assert (shared.cfg.shared_steps, shared.cfg.steps) == (6, 4)  # s = 1.5 -> 2: caps 3 x 2, 4
    # Scores during training: the shared variant's pairs as per-class's, gan's K times apart.
    scored = dataclasses.replace(tiny(), score_every=2, score_n=20)
    per_class, gan, shared = variant_configs(scored, [100, 50, 25], opts, ranks=2)
    assert (
        (shared.cfg.score_every, shared.cfg.score_n)
        == (2, 20)
        == (
            per_class.cfg.score_every,
            per_class.cfg.score_n,
        )
    )
    assert (gan.cfg.score_every, gan.cfg.score_n) == (6, 60)


def test_the_shared_phase_runs_on_every_rank_so_its_batch_must_split_over_them():
    # 3 classes on 2 ranks: the pairs train alone (a batch of 15 is fine for them), the shared
    # phase on both ranks (15 images cannot split in two).
    odd = dataclasses.replace(tiny(), batch_size=15)
    alone = CompareOptions(out="x", variants=("per-class",))
    assert [v.cfg.steps for v in variant_configs(odd, [9, 9, 9], alone, ranks=2)] == [6]
    with pytest.raises(UserError, match="the shared-per-class variant trains on groups of 2 ranks"):
        variant_configs(odd, [9, 9, 9], CompareOptions(out="x", variants=(SHARED,)), ranks=2)


def test_a_shared_phase_that_outran_its_seconds_is_said_by_its_own_budget():
    opts = CompareOptions(out="x", variants=(SHARED,), budget="time", budget_s=4.0)
    [v] = variant_configs(tiny(), [9, 9], opts, ranks=1)  # 2 s shared; 1 s for each pair
    assert (v.budget.shared_s, v.budget.pair_s) == (2.0, 1.0)
    row = _Row("all", steps=1, train_s=3.0, time_up=True)  # 3 s: within twice its 2 s
    check_time_spent(v, [row, _Row("class_000", 1, 1.5, True)])
    with pytest.raises(UserError, match=r"gives the shared-per-class shared phase 2 s, shorter"):
        check_time_spent(v, [dataclasses.replace(row, train_s=4.5)])
    with pytest.raises(UserError, match=r"gives each shared-per-class pair 1 s, shorter"):
        check_time_spent(v, [row, _Row("class_000", 1, 2.5, True)])
    # A gan run's one pair is task all/ too, and has no shared phase: its pair's seconds.
    gan = dataclasses.replace(opts, variants=("gan",), shared_fraction=None)
    [v] = variant_configs(tiny(), [9, 9], gan, ranks=1)
    with pytest.raises(UserError, match=r"gives each gan pair 4 s, shorter"):
        check_time_spent(v, [dataclasses.replace(row, train_s=8.5)])


@dataclasses.dataclass(frozen=True)
class _Row:  # the fields of a summary row that check_time_spent reads
    task: str
    steps: int
    train_s: float
    time_up: bool


def test_the_steps_cell_says_both_phases():
    row = {"pairs": 10, "steps": 450, "shared_steps": 4500}
    assert steps_cell(row) == "4,500 shared + 450 a class (10 pairs)"
    timed = {**row, "pair_s": 9.0, "shared_s": 40.0, "shared_steps_reached": 3000}
    timed |= {"steps_reached": 300.0, "steps_reached_range": [290, 310]}
    assert steps_cell(timed) == "3,000 of 4,500 shared + 300 (290-310) of 450 a class (10 pairs)"
    assert steps_cell({"pairs": 10, "steps": 900}) == "900 per class (10 pairs)"


def _compare(digits_file, out, *extra):
    return ["compare", "--preset", "tiny", "--data", str(digits_file), "--out", str(out), *extra]


@pytest.mark.parametrize(
    "extra, message",
    [
        *(
            (
                ["--variants", SHARED, "--shared-fraction", f],
                f"--shared-fraction {f} is not between 0 and 1: it is the share of the budget",
            )
            for f in ("0", "1", "-0.1", "1.5")
        ),
        (
            ["--variants", "per-class", "cgan", "--shared-fraction", "0.3"],
            "--shared-fraction 0.3 goes with the shared-per-class variant: add it to --variants",
        ),
        (["--freeze-d", "1"], "--freeze-d 1 goes with the shared-per-class variant"),
        (["--variants", SHARED, "--freeze-d", "9"], "--freeze-d 9 is beyond D's depth"),
        (["--variants", SHARED, "--freeze-d", "-1"], "--freeze-d must be >= 0"),
        (
            ["--variants", SHARED, "--shared-fraction", "0.05"],
            "--shared-fraction 0.05 of --steps 6 leaves no step to the shared phase",
        ),
        (["--variants", SHARED, "--shared-steps", "3"], "unrecognized arguments: --shared-steps"),
        (["--shared-time-limit-s", "3"], "unrecognized arguments: --shared-time-limit-s 3"),
        (["--variants", SHARED, SHARED], "name each of per-class, gan, cgan, shared-per-class"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, digits_file, capsys, extra, message):
    out = tmp_path / "cmp"
    assert main(_compare(digits_file, out, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"shared_steps": 4}, "compare sets shared_steps itself"),
        ({"shared_steps": 4, "shared_time_limit_s": 9.0}, "compare sets shared_steps itself"),
        ({"init_from": "runs/gan"}, "compare trains every variant from scratch"),
    ],
)
def test_a_config_file_that_sets_a_start_is_refused(tmp_path, digits_file, capsys, fields, message):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(fields))
    out = tmp_path / "cmp"
    assert main(_compare(digits_file, out, "--config", str(config))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()


def test_compare_help_offers_the_fraction_and_freeze_d_not_the_phase_compare_sets(
    capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps at hyphens: one line per flag
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--shared-fraction SHARED_FRACTION" in text and "--freeze-d FREEZE_D" in text
    assert "(default 0.5, the only one measured yet: docs/studies/shared-start.md)" in text
    assert "of per-class, gan, cgan and shared-per-class" in text
    assert "(default: the first three)" in text
    for flag in ("--shared-steps", "--shared-time-limit-s", "--init-from", "--mode"):
        assert flag not in text, flag


def test_the_plan_shows_the_shared_phase(tmp_path, digits_file, capsys):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "2", "--network", str(net))
    args += ["--variants", "per-class", SHARED, "--shared-fraction", "0.25", "--dry-run"]
    assert main(args) == 0
    plan = capsys.readouterr().out
    assert "shared-per-class trains one DC-GAN on all the classes for K x s steps" in plan
    assert "(F = 0.25, the shared fraction)" in plan
    head, per_class, shared = (
        line.split() for line in plan.splitlines()[1:4]
    )  # fmt: skip
    assert head[:6] == [
        "variant",
        "shared_steps",
        "pairs",
        "steps_per_pair",
        "batch",
        "images_seen",
    ]
    assert per_class[:6] == ["per-class", "-", "3", "6", "16", "288"]
    assert shared[:6] == [SHARED, "6", "3", "4", "16", "288"]  # 6 + 3 x 4 = 3 x 6 steps
    assert not out.exists()


@pytest.mark.mpi
def test_a_tiny_comparison_with_a_shared_start_on_two_ranks_and_its_resume(tmp_path, digits_file):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "net.pt")
    args = _compare(digits_file, out, "--classes", "0", "1", "2", "--network", str(net))
    args += ["--n", "30", "--splits", "2", "--no-real", "--no-progress", "--devices", "cpu"]
    args += ["--variants", SHARED, "per-class", "--shared-fraction", "0.25", "--freeze-d", "1"]
    first = run_cli(*args, ranks=2)
    assert first.returncode == 0, first.stderr
    doc = json.loads((out / "compare.json").read_text())
    rows = doc["variants"]
    assert list(rows) == [SHARED, "per-class"]
    row = rows[SHARED]
    # tiny: 6 steps a class; s = 0.25 x 6 = 1.5 -> 2: a shared phase of 3 x 2 = 6 steps, then
    # 4 a class: (6 + 3 x 4) x 16 = 288 images, per-class's (3 x 6 x 16), as the images rule says.
    assert (row["shared_steps"], row["shared_steps_reached"], row["steps"]) == (6, 6, 4)
    assert row["images_seen"] == rows["per-class"]["images_seen"] == 3 * 6 * 16
    assert row["epochs_per_image"] == rows["per-class"]["epochs_per_image"]
    assert (doc["budget"]["shared_fraction"], doc["budget"]["freeze_d"]) == (0.25, 1)
    assert doc["budget"]["variants"][SHARED]["shared_steps"] == 6

    summary = RunDir(out / SHARED).summary_rows()
    assert {r.task for r in summary} == {"all", "class_000", "class_001", "class_002"}
    [phase] = [r for r in summary if r.task == "all"]
    assert phase.ranks == [0, 1] and phase.steps == 6 and phase.effective_batch == 16
    # Its cost counts the shared phase: the slowest rank's seconds with it (both ranks trained
    # it), more than the classes' alone; every row's core-seconds summed.
    pairs = [r for r in summary if r.task != "all"]
    assert row["train_s"] == round(slowest_rank_s(summary), 1)
    assert slowest_rank_s(summary) == pytest.approx(slowest_rank_s(pairs) + phase.train_s)
    assert row["shared_train_s"] == round(phase.train_s, 1)
    assert row["device_s"] == round(sum(r.core_s for r in summary), 1)
    config = json.loads((out / SHARED / "config.json").read_text())
    assert (config["mode"], config["shared_steps"], config["freeze_d"]) == ("per-class", 6, 1)
    assert json.loads((out / "per-class" / "config.json").read_text())["freeze_d"] == 0

    # A per-class variant to the scores: labelled samples, class accuracy, a class's FID.
    assert row["labelled"] and 0 <= row["class_accuracy"] <= 1
    assert sorted(row["per_class_fid"]) == ["0", "1", "2"] and row["fid_class_mean"] is not None
    assert row["label_tv"] is not None
    table = (out / "compare.md").read_text()
    line = next(x for x in table.splitlines() if x.startswith("| per-class DC-GAN from a shared"))
    assert "| 6 shared + 4 a class (3 pairs) | 288 |" in line
    assert "shared-per-class trains one DC-GAN on all the classes for K x s steps" in table
    assert "D's first 1 block(s) kept as the shared phase left them (--freeze-d)" in table
    # Two labelled panels of 3 rows x 10 columns (684 x 208 px each), no column of shares.
    assert Image.open(out / "compare.png").size == (8 + 14 + 2 * 684 + 12 + 8, 8 + 30 + 208 + 8)

    # --resume keeps the stored fraction and --freeze-d: nothing is trained or scored again.
    again = run_cli("compare", "--out", str(out), "--resume", "--no-progress", ranks=2)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("trained and scored already") == 2
    assert not [e for e in events(again.stdout) if e["event"] == "class_start"]
    # A budget that changes the finished shared phase is refused in one line, before training:
    # --steps 10 makes s = 2.5 -> 3, a shared phase of 9 steps.
    grown = run_cli("compare", "--out", str(out), "--resume", "--steps", "10", ranks=2)
    assert grown.returncode == 2
    err = grown.stderr.strip().splitlines()
    assert len(err) == 1 and "was trained with a shared phase of 6 steps" in err[0], err
    assert "the budget now gives 9" in err[0]
    # One that keeps it (--steps 8: s = 2, still 6 shared) continues the classes from 4 to 6
    # steps (and per-class's from 6 to 8); the shared phase is not trained again.
    more = run_cli("compare", "--out", str(out), "--resume", "--steps", "8", ranks=2)
    assert more.returncode == 0, more.stderr
    starts = [e for e in events(more.stdout) if e["event"] == "class_start"]
    assert {(e["task"], e["start_step"], e["steps"]) for e in starts} == {
        (f"class_00{k}", *steps) for k in range(3) for steps in ((4, 6), (6, 8))
    }
    row = json.loads((out / "compare.json").read_text())["variants"][SHARED]
    assert (row["shared_steps"], row["steps"], row["images_seen"]) == (6, 6, (6 + 3 * 6) * 16)
    # A resume without the variant keeps its stored fraction and --freeze-d, unused.
    alone = run_cli("compare", "--out", str(out), "--resume", "--variants", "per-class", ranks=2)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.count("trained and scored already") == 1
    assert list(json.loads((out / "compare.json").read_text())["variants"]) == ["per-class"]
