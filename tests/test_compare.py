"""`distcgan compare`: the budget rule, the per-variant configs, bad input and the refusal to
clobber, a resume that extends the budget, and a tiny three-way comparison under real
`mpiexec -n 2` that a second launch with --resume finishes without retraining anything."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
from helpers import REPO, events, run_cli, save_tiny
from PIL import Image

from distcgan.cli import main
from distcgan.compare.experiment import VARIANTS, training_options, variant_configs
from distcgan.compare.seeds import label_tv
from distcgan.config import preset, tiny
from distcgan.data import is_unlabelled
from distcgan.errors import UserError
from distcgan.options import CompareOptions
from distcgan.plan import equal_budget
from distcgan.run.rundir import RunDir

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


def test_the_budget_gives_every_variant_the_same_images_on_unequal_classes():
    counts = [100, 50, 25]
    budget = equal_budget(counts, steps=10, batch=8)
    assert (budget["per-class"].pairs, budget["per-class"].steps) == (3, 10)
    # gan and cgan: one pair, the sum of the per-class steps
    assert all((budget[m].pairs, budget[m].steps) == (1, 30) for m in ("gan", "cgan"))
    assert {m: b.images_seen for m, b in budget.items()} == {m: 240 for m in VARIANTS}
    assert all(b.batch == 8 for b in budget.values())
    # Per class, class i's images are seen steps * batch / counts[i] times (0.8, 1.6, 3.2);
    # averaged over the images that is how often gan and cgan see every image.
    per_class = [10 * 8 / n for n in counts]
    mean = sum(e * n for e, n in zip(per_class, counts)) / sum(counts)
    for b in budget.values():
        assert math.isclose(b.epochs_per_image, mean) and math.isclose(mean, 240 / 175)
    with pytest.raises(ValueError):
        equal_budget([10, 0], 5, 4)


def test_every_variant_trains_at_the_same_effective_batch_on_any_number_of_ranks():
    base = tiny()  # batch 16, 6 steps
    variants = variant_configs(base, [100, 50, 25], CompareOptions(out="x"), ranks=2)
    assert [(v.cfg.mode, v.cfg.steps) for v in variants] == [
        ("per-class", 6),
        ("gan", 18),
        ("cgan", 18),
    ]
    per_class, gan, _ = variants
    assert per_class.cfg.micro_batch(1) == 16  # one rank per class
    assert gan.cfg.micro_batch(2) * 2 == 16  # two ranks share the pair's batch of 16
    # Five ranks, three classes: groups of 2, 2 and 1; a batch of 15 cannot split in two.
    odd = dataclasses.replace(base, batch_size=15)
    with pytest.raises(UserError, match="groups of 2 ranks.*multiple of 2"):
        variant_configs(odd, [9, 9, 9], CompareOptions(out="x", variants=("per-class",)), ranks=5)


def _compare(digits_file, out, *extra):
    return ["compare", "--preset", "tiny", "--data", str(digits_file), "--out", str(out), *extra]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--variants", "gan", "gan"], "--variants gan gan: name each of per-class, gan, cgan"),
        (["--variants", "dcgan"], "--variants dcgan: name each of"),
        (["--n", "5"], "--n 5 is too few: it must be at least the 10 classes"),
        (["--batch-size", "15", "--grad-accum", "2"], "cannot share a batch of 15 images"),
        (["--network", "missing.pt"], "--network missing.pt: no such file"),
        (["--weights", "w.pth"], "--weights goes with --network inception-v3"),
        (["--resume", "--overwrite"], "nothing to resume"),
        (["--mode", "gan"], "unrecognized arguments: --mode gan"),
        (["--seeds", "0"], "--seeds must be >= 1, got 0"),
        (["--eval-seed", "-1"], "argument --eval-seed: a seed is a whole number >= 0, got -1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, digits_file, capsys, extra, message):
    out = tmp_path / "cmp"
    assert main(_compare(digits_file, out, *extra)) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_an_existing_directory_is_never_clobbered(tmp_path, digits_file, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = _compare(digits_file, out)
    assert main(args) == 2
    assert "already exists: pass --resume to continue" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 2  # not a comparison directory: never deleted
    assert "not a comparison directory (no compare-config.json)" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_comparison_on_a_g_d_device_pair_samples_on_gs_device(tmp_path, digits_file, capsys):
    # --devices G,D trains G and D apart; the samples are drawn on G's device (sample takes one
    # device a rank, and was handed the pair: exit 2 after the first variant had trained).
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "tiny.pt")
    args = _compare(digits_file, out, "--variants", "per-class", "--classes", "0", "--steps", "2")
    args += ["--network", str(net), "--n", "10", "--splits", "2", "--no-real", "--no-progress"]
    assert main([*args, "--devices", "cpu,cpu"]) == 0, capsys.readouterr().err
    assert json.loads((out / "per-class" / "config.json").read_text())["devices"] == "cpu,cpu"
    assert (out / "per-class" / "samples.h5").is_file() and (out / "compare.json").is_file()


def test_resume_continues_a_variant_when_the_budget_grows(tmp_path, digits_file, capsys):
    out, net = tmp_path / "cmp", save_tiny(tmp_path / "tiny.pt")
    args = _compare(digits_file, out, "--variants", "gan", "--classes", "0", "1", "--steps", "3")
    args += ["--network", str(net), "--n", "20", "--splits", "2", "--no-real", "--no-progress"]
    assert main(args) == 0
    capsys.readouterr()
    # The stored scoring options (network, n, splits...) are kept; --steps may grow.
    assert main(["compare", "--out", str(out), "--resume", "--steps", "4", "--no-progress"]) == 0
    starts = [e for e in events(capsys.readouterr().out) if e["event"] == "class_start"]
    assert [(e["start_step"], e["steps"]) for e in starts] == [(6, 8)]  # K x S: 2 x 3, 2 x 4
    doc = json.loads((out / "compare.json").read_text())
    assert doc["variants"]["gan"]["images_seen"] == 8 * 16 and doc["real"] is None
    assert doc["scoring"]["network"] == str(net) and doc["scoring"]["n"] == 20

    # Two more run seeds on --resume: seed 0 is not retrained; seeds 1 and 2 train in seed-1/,
    # seed-2/; compare.json keeps every seed's row; the table shows mean and 95% interval.
    seed0 = {p: p.stat().st_mtime_ns for p in (out / "gan").rglob("*.pt")}
    assert main(["compare", "--out", str(out), "--resume", "--seeds", "3", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    starts = [e for e in events(printed) if e["event"] == "class_start"]
    assert [(e["start_step"], e["steps"]) for e in starts] == [(0, 8), (0, 8)]
    assert {p: p.stat().st_mtime_ns for p in (out / "gan").rglob("*.pt")} == seed0
    doc = json.loads((out / "compare.json").read_text())
    assert doc["seeds"] == [0, 1, 2] and list(doc["runs"]) == ["0", "1", "2"]
    values = [doc["runs"][s]["gan"]["is_mean"] for s in ("0", "1", "2")]
    assert len(set(values)) == 3  # three different trainings
    for s in (1, 2):
        assert json.loads((out / f"seed-{s}" / "gan" / "config.json").read_text())["seed"] == s
    st = doc["variants"]["gan"]["stats"]["is_mean"]
    assert st["values"] == values and st["lo"] < st["mean"] < st["hi"]
    for key in ("precision", "recall"):
        assert 0 <= doc["variants"]["gan"][key] <= 1
    assert f"{st['mean']:.3f} [{st['lo']:.3f}, {st['hi']:.3f}]" in (out / "compare.md").read_text()

    # A samples file deleted (to save disk) is sampled again on --resume, to the same row; no
    # training. (It was a FileNotFoundError traceback where compare.png reads it.)
    (out / "gan" / "samples.h5").unlink()
    assert main(["compare", "--out", str(out), "--resume", "--seeds", "3", "--no-progress"]) == 0
    assert not [e for e in events(capsys.readouterr().out) if e["event"] == "class_start"]
    again = json.loads((out / "compare.json").read_text())
    assert (out / "gan" / "samples.h5").is_file() and again["runs"] == doc["runs"]


def test_the_training_options_are_those_over_the_preset_that_change_a_step():
    base = dataclasses.replace(
        preset("digits"), mode="gan", classes=(1, 2), seed=3, threads=1, data="x.h5", steps=5
    )
    assert training_options(base) == {}  # set by compare, placement or bookkeeping
    changed = dataclasses.replace(base, resolution=32, schedule="async", lr_d=1e-4)
    assert training_options(changed) == {"resolution": 32, "lr_d": 1e-4, "schedule": "async"}
    own = dataclasses.replace(base, preset="mine", augment="cutout")  # a config file's name
    assert training_options(own) == {"batch_size": 32, "augment": "cutout"}


def test_the_interval_over_seeds_is_students_t():
    from distcgan.compare.seeds import interval, separated

    got = interval([1.0, 2.0, 3.0])
    # mean 2, s = 1, t(0.975, 2) = 4.302653: 2 +- 4.302653 / sqrt(3)
    assert got["mean"] == 2.0 and got["hi"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3))
    assert interval([5.0])["lo"] is None and interval([1.0, None]) is None
    assert separated(interval([1.0, 1.1, 0.9]), interval([2.0, 2.1, 1.9]))
    assert not separated(got, interval([2.5, 3.0, 3.5]))


def test_the_per_class_fid_mean_is_over_the_classes_and_none_without_every_class():
    from distcgan.compare.seeds import class_mean

    assert class_mean({"0": 1.0, "1": 3.0, "7": 8.0}) == 4.0
    assert class_mean(None) is None and class_mean({}) is None  # a DC-GAN: no classes
    assert class_mean({"0": 1.0, "1": None}) is None  # a class without a score: no mean


def test_a_paired_difference_is_students_t_over_the_per_seed_differences():
    from distcgan.compare.seeds import paired, verdict

    # differences 1, 2, 3: mean 2, half-width 4.302653 / sqrt(3) = 2.484
    d = paired([1.0, 1.0, 1.0], [2.0, 3.0, 4.0])
    assert d["mean"] == 2.0 and d["half"] == pytest.approx(4.302653 / math.sqrt(3)) and d["n"] == 3
    assert verdict(d, True, ("helps", "hurts")) == "cannot tell"  # 2 < 2.484: holds 0
    # a seed effect shared by both arms cancels: arms 0..40 apart, difference always 1
    d = paired([0.0, 20.0, 40.0], [1.0, 21.0, 41.0])
    assert d["mean"] == 1.0 and d["half"] == 0.0
    assert verdict(d, True, ("helps", "hurts")) == "helps"
    assert verdict(d, False, ("helps", "hurts")) == "hurts"  # e.g. FID went up
    one = paired([1.0], [2.0])
    assert one["half"] is None and verdict(one, True, ("", "")) == "cannot tell"
    with pytest.raises(ValueError):
        paired([1.0, 2.0], [1.0])


def _compare_json(
    d,
    seeds,
    fids,
    scoring_n=1000,
    training=None,
    amp=None,
    tops=None,
    net="net.pt",
    variants=("per-class", "gan"),
    **doc_keys,
):
    """A compare directory's compare.json with the per-seed rows paired_compare.py reads, of
    `variants` (rows before 2026-11-28 have no `amp` and no `label_shares`: `tops` gives the gan
    rows' share of class 1, the rest class 0's; `doc_keys` add to or replace the document's
    keys)."""
    d.mkdir()
    runs = {}
    for i, (s, fid) in enumerate(zip(seeds, fids, strict=True)):
        row = {"is_mean": 2.0, "fid": fid, "precision": 0.5, "recall": 0.5}
        row |= {"amp": amp} if amp else {}
        gan = {**row, "class_accuracy": None, "per_class_fid": None}
        if tops:
            gan["label_shares"] = {"0": 1 - tops[i], "1": tops[i]}
        # A row older than fid_class_mean: paired_compare takes it from per_class_fid.
        per = {"0": 2 * fid, "1": 4 * fid}
        both = {"per-class": {**row, "class_accuracy": 0.9, "per_class_fid": per}, "gan": gan}
        runs[str(s)] = {v: both[v] for v in variants}
    scoring = {"network": str(net), "n": scoring_n, "seed": 0, "classifier": {}}
    doc = {
        "data": "data.h5",
        "classes": [0, 1],
        "seeds": seeds,
        "variants": {v: {} for v in variants},
        "runs": runs,
        "scoring": scoring,
        **({"training": training} if training else {}),  # none before 2026-11-27
        **doc_keys,
    }
    (d / "compare.json").write_text(json.dumps(doc))


def test_paired_compare_prints_the_paired_table_and_says_bad_input_in_one_line(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    script = [sys.executable, str(REPO / "benchmarks" / "paired_compare.py")]
    _compare_json(tmp_path / "a", [0, 1, 2], [5.0, 9.0, 7.0])
    _compare_json(tmp_path / "b", [0, 1, 2, 3], [4.0, 8.0, 6.0, 1.0])  # seed 3: A lacks it
    cmd = [*script, str(tmp_path / "a"), str(tmp_path / "b"), "--names", "sync", "async", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("3 seeds (0, 1, 2)")
    assert out[2] == "sync: precision not recorded; async: precision not recorded"
    # FID lower by exactly 1 on every shared seed: async better, interval of width 0
    assert "| per-class | FID | 7.000 | 6.000 | -1.000 +- 0.000 | async better |" in out
    # the mean of each seed's two per-class FIDs, 3 x its pooled one: 21 against 18
    row = "| per-class | FID a class (mean) | 21.000 | 18.000 | -3.000 +- 0.000 | async better |"
    assert row in out
    for metric in ("class accuracy", "FID a class (mean)"):  # a DC-GAN has neither
        assert f"| gan | {metric} |" not in "\n".join(out)
    doc = json.loads(out[-1])
    assert doc["seeds"] == [0, 1, 2] and doc["variants"]["gan"]["fid"]["verdict"] == "async better"

    # An arm whose seeds were split over two comparisons: seeds 0-2 and seed 3 put together
    _compare_json(tmp_path / "a3", [3], [3.0])
    cmd = [*script, f"{tmp_path / 'a'},{tmp_path / 'a3'}", str(tmp_path / "b")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("4 seeds (0, 1, 2, 3)")
    # B - A per seed: -1, -1, -1, -2
    assert "| per-class | FID | 6.000 | 4.750 | -1.250 +- 0.796 | B better |" in out
    # A directory whose own name has a comma is one arm, not two
    _compare_json(tmp_path / "x,y", [0, 1, 2], [4.0, 8.0, 6.0])
    cmd = [*script, str(tmp_path / "a"), str(tmp_path / "x,y")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert "| per-class | FID | 7.000 | 6.000 | -1.000 +- 0.000 | B better |" in out

    # Each arm's training options are said; an arm of seeds trained differently is refused.
    cc = {"preset": "digits", "options": {"augment": "color,cutout"}}
    _compare_json(tmp_path / "cc", [0, 1], [1.0, 2.0], training=cc)
    _compare_json(tmp_path / "cc2", [2], [3.0], training=cc)
    _compare_json(tmp_path / "none", [4], [3.0], training={"preset": "digits", "options": {}})
    cmd = [*script, str(tmp_path / "a"), f"{tmp_path / 'cc'},{tmp_path / 'cc2'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1] == (
        "A: training options not recorded (a compare.json from before 2026-11-27); "
        "B: the preset `digits`, with augment color,cutout"
    )
    # An arm joining an older file (no `training`) with recorded ones: said, and the recorded
    # ones must still agree, whichever file comes first.
    cmd = [*script, str(tmp_path / "b"), f"{tmp_path / 'a3'},{tmp_path / 'cc'}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[1].endswith(
        "B: the preset `digits`, with augment color,cutout (recorded in 1 of its 2 compare.json "
        "files; the rest, from before 2026-11-27, taken on trust)"
    )
    cmd += ["--json"]
    doc = json.loads(subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[-1])
    assert doc["training"] == [None, cc] and doc["recorded"] == [[0, 1], [1, 2]]
    _compare_json(tmp_path / "c", [0, 1, 2], [5.0, 9.0, 7.0], scoring_n=500)
    (tmp_path / "d").mkdir()
    _compare_json(tmp_path / "e", [7], [1.0])
    _compare_json(tmp_path / "f", [2, 3], [1.0, 1.0])
    for other, message in (
        ("c", "were scored differently"),
        ("d", "compare.json does not exist"),
        ("e", "share no seed of any variant"),
        ("a3,c", "were scored differently"),  # within one arm
        ("a3,f", "seed 3 of per-class is in both"),
        ("a3,", "has an empty directory name"),
        (
            "cc,none",
            "trained differently (the preset `digits`, with augment color,cutout against "
            "the preset `digits`, as it is): join only comparisons of one setting in an arm",
        ),
        ("a3,cc2,none", "cc2 and " + str(tmp_path / "none") + " trained differently"),
        (
            "bf,off",
            "(seed 1, per-class) trained in different precisions (--amp bf16 against off): "
            "join only runs of one precision in an arm",
        ),
    ):
        if other == "bf,off":
            _compare_json(tmp_path / "bf", [0], [1.0], amp="bf16")
            _compare_json(tmp_path / "off", [1], [1.0], amp="off")
        other = ",".join(str(tmp_path / d) if d else "" for d in other.split(","))
        r = subprocess.run([*script, str(tmp_path / "a"), other],
                           capture_output=True, text=True)  # fmt: skip
        assert r.returncode == 2 and message in r.stderr.splitlines()[-1]


def test_paired_compare_joins_comparisons_split_by_variant_into_one_table(tmp_path):
    """#27's 3x tables trained each variant as its own comparison (`--variants gan`, then
    `--variants per-class`, one seed at a time): one arm joins them, each variant compared over
    the seeds at which both arms have it, and the header says which those are."""
    import subprocess
    import sys

    from helpers import REPO

    script = [sys.executable, str(REPO / "benchmarks" / "paired_compare.py")]
    for arm, shift in (("none", 0.0), ("aug", -1.0)):
        for s in (0, 1, 2):  # gan: seeds 0-2, each its own comparison
            _compare_json(tmp_path / f"gan-{arm}-{s}", [s], [5.0 + s + shift], variants=["gan"])
        # per-class: seeds 0 and 1, one comparison; augmented better by 2 (FID 2 x the shift)
        fids = [3.0 + 2 * shift, 4.0 + 2 * shift]
        _compare_json(tmp_path / f"pc-{arm}", [0, 1], fids, variants=["per-class"])
    arm = ",".join(str(tmp_path / f"gan-{{}}-{s}") for s in (0, 1, 2)) + f",{tmp_path}/pc-{{}}"
    cmd = [*script, arm.format(*["none"] * 4), arm.format(*["aug"] * 4), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("gan: 3 seeds (0, 1, 2); per-class: 2 seeds (0, 1): A = ")
    assert "| gan | FID | 6.000 | 5.000 | -1.000 +- 0.000 | B better |" in out
    assert "| per-class | FID | 3.500 | 1.500 | -2.000 +- 0.000 | B better |" in out
    doc = json.loads(out[-1])
    assert doc["seeds"] == [0, 1, 2]
    assert doc["seeds_by_variant"] == {"gan": [0, 1, 2], "per-class": [0, 1]}

    # A seed of a variant given twice in one arm is refused, by variant: the same seed of
    # another variant is not.
    _compare_json(tmp_path / "pc-again", [1], [9.0], variants=["per-class"])
    r = subprocess.run([*script, arm.format(*["none"] * 4) + f",{tmp_path}/pc-again",
                        arm.format(*["aug"] * 4)], capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2
    assert r.stderr == (
        f"paired_compare.py: seed 1 of per-class is in both {tmp_path}/pc-none and "
        f"{tmp_path}/pc-again: give each seed of a variant once in an arm\n"
    )
    # Two arms that share variants but no seed of any: one line.
    r = subprocess.run([*script, str(tmp_path / "gan-none-0"), str(tmp_path / "gan-aug-1")],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2
    assert "share no seed of any variant (seeds [0] and [1], variants gan and gan)" in r.stderr


def test_paired_compare_pairs_the_label_tv_and_classifies_older_rows(tmp_path, digits_file):
    import shutil
    import subprocess
    import sys

    from helpers import REPO, make_samples

    from distcgan.compare.seeds import label_tv
    from distcgan.data import read_info
    from distcgan.eval.metrics.networks import sha256_file
    from distcgan.run.comparedir import CompareDir
    from distcgan.run.rundir import write_json

    script = [sys.executable, str(REPO / "benchmarks" / "paired_compare.py")]
    net, samples = save_tiny(tmp_path / "net.pt"), make_samples(digits_file, tmp_path / "s.h5")
    # Two equal classes: a G that draws class 1 a share t of the time is |t - 0.5| from them.
    half = {"counts": [100, 100], "net": net}  # every arm scored alike
    _compare_json(tmp_path / "a", [0, 1, 2], [5.0, 9.0, 7.0], tops=[0.9, 0.7, 0.8], **half)
    _compare_json(tmp_path / "b", [0, 1, 2], [4.0, 8.0, 6.0], tops=[0.7, 0.5, 0.6], **half)
    cmd = [*script, str(tmp_path / "a"), str(tmp_path / "b"), "--names", "none", "aug"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert "| gan | label TV | 0.300 | 0.100 | -0.200 +- 0.000 | aug better |" in out
    assert "| per-class | label TV |" not in "\n".join(out)  # its rows have no shares
    # Shares but no counts (compare.json before 2026-11-28 and its data file gone): no label TV.
    _compare_json(tmp_path / "nocounts", [0, 1, 2], [4.0, 8.0, 6.0], tops=[0.7, 0.5, 0.6], net=net)
    cmd = [*script, str(tmp_path / "a"), str(tmp_path / "nocounts")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "| gan | FID |" in out and "label TV" not in out
    # Rows scored before the shares were kept: none without --shares; with it, the samples of
    # each seed's run (while its row.json holds the row) are classified with the comparison's
    # network, as `distcgan evaluate` counts them, against the classes of its data file (its
    # compare.json says no counts).
    old = tmp_path / "old"
    _compare_json(old, [0, 1, 2], [4.0, 8.0, 6.0], net=net, data=str(digits_file),
                  classes=list(range(10)))  # fmt: skip
    for seed, fid in zip([0, 1, 2], [4.0, 8.0, 6.0], strict=True):
        rd = CompareDir(old).variant(seed, 0, "gan")
        rd.path.mkdir(parents=True)
        sha = sha256_file(net)  # the network the row was scored with, as compare records it
        fingerprint = {"network_sha256": sha}
        write_json(rd.row, {"fingerprint": fingerprint, "row": {"fid": fid if seed else 99.0}})
        shutil.copy(samples, rd.samples)  # seed 0's run was trained again since: not used
    cmd = [*script, str(tmp_path / "a"), str(old), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert "label_tv" not in json.loads(out[-1])["variants"]["gan"]
    out = subprocess.run([*cmd, "--shares"], capture_output=True, text=True, check=True).stdout
    said = "--shares: classified A: 0 of the 3 rows without label shares; B: 2 of the 6 rows"
    assert said in out
    _compare_json(tmp_path / "a2", [1, 2], [9.0, 7.0], tops=[0.7, 0.8], **half)
    cmd = [*script, str(tmp_path / "a2"), str(old), "--json", "--shares"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    args = ["evaluate", "--samples", str(samples), "--network", str(net), "--devices", "cpu"]
    assert main([*args, "--json", str(tmp_path / "e.json")]) == 0
    shares = json.loads((tmp_path / "e.json").read_text())["label_shares"]
    counts = read_info(str(digits_file)).counts
    tv = label_tv(shares, {str(k): n for k, n in enumerate(counts)})
    got = json.loads(out.splitlines()[-1])["variants"]["gan"]["label_tv"]["b"]
    assert got == pytest.approx([tv, tv]) and 0 < tv < 1
    # Another network at that path than the rows were scored with: one line, exit 2 (its
    # labels would not be the row's); --weights without --shares: one line, exit 2.
    save_tiny(net, seed=1)
    r = subprocess.run(cmd, capture_output=True, text=True)
    said = f"(seed 1, gan) was scored with a network whose SHA-256 begins {sha[:16]}, and {net}"
    assert r.returncode == 2 and said in r.stderr and r.stderr.count("\n") == 1
    assert r.stderr.rstrip().endswith(f"put the classifier it was scored with back at {net}")
    r = subprocess.run([*cmd[:-1], "--weights", str(net)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("paired_compare.py: --weights goes with")
    # A network that is no longer where compare.json says: one line, exit 2.
    net.unlink()
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("paired_compare.py: --shares: --network")


def test_paired_compare_shares_takes_an_inceptions_weights_and_checks_each_rows(
    tmp_path, tv_weights
):
    # A comparison scored with inception-v3 on a 1,000-class data set (3 samples, of classes
    # 0-2), its rows from before the label shares were kept: --shares classifies them with the
    # weights --weights gives, which must be those each row.json says the row was scored with.
    import shutil
    import subprocess
    import sys

    import numpy as np
    import torch
    from helpers import REPO

    from distcgan.data import write_dataset
    from distcgan.eval.metrics.networks import sha256_file
    from distcgan.run.comparedir import CompareDir
    from distcgan.run.rundir import write_json

    script = [sys.executable, str(REPO / "benchmarks" / "paired_compare.py")]
    samples = tmp_path / "s.h5"
    images = np.random.default_rng(0).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    write_dataset(samples, images, np.arange(3), [f"c{k}" for k in range(1000)], "test")
    other = tmp_path / "other.pth"  # valid weights, not the ones the rows were scored with
    state = torch.load(tv_weights, weights_only=True)
    state["fc.bias"] = state["fc.bias"] + 1.0
    torch.save(state, other)
    arms = {}
    for arm, fids in (("a", [5.0, 9.0]), ("b", [4.0, 8.0])):
        d = arms[arm] = tmp_path / arm
        _compare_json(d, [0, 1], fids, net="inception-v3", data=str(samples),
                      classes=list(range(1000)))  # fmt: skip
        for seed, fid in zip([0, 1], fids, strict=True):
            rd = CompareDir(d).variant(seed, 0, "gan")
            rd.path.mkdir(parents=True)
            fingerprint = {"network_sha256": sha256_file(tv_weights)}  # as compare records it
            write_json(rd.row, {"fingerprint": fingerprint, "row": {"fid": fid}})
            shutil.copy(samples, rd.samples)
    cmd = [*script, str(arms["a"]), str(arms["b"]), "--shares", "--json"]

    def run(*extra):
        return subprocess.run([*cmd, *extra], capture_output=True, text=True)

    r = run("--weights", str(tv_weights))  # the weights the rows were scored with
    assert r.returncode == 0, r.stderr
    assert "--shares: classified A: 2 of the 4 rows without label shares; B: 2 of the 4" in r.stdout
    assert "label_tv" in json.loads(r.stdout.splitlines()[-1])["variants"]["gan"]
    # Other weights: one line naming the file given and what to give instead.
    r = run("--weights", str(other))
    sha = sha256_file(tv_weights)
    said = (
        f"(seed 0, gan) was scored with a network whose SHA-256 begins {sha[:16]}, and {other} is"
    )
    assert r.returncode == 2 and said in r.stderr and r.stderr.count("\n") == 1
    assert r.stderr.rstrip().endswith("give the weights it was scored with as --weights FILE")
    # Samples of 10 classes: an Inception's 1,000 outputs are not their classes, so no row is
    # classified, and the weights do not matter.
    ten = tmp_path / "ten.h5"
    write_dataset(ten, images, np.arange(3), [f"c{k}" for k in range(10)], "test")
    for arm in arms.values():
        for seed in (0, 1):
            shutil.copy(ten, CompareDir(arm).variant(seed, 0, "gan").samples)
    r = run("--weights", str(other))
    assert r.returncode == 0, r.stderr
    assert "--shares: classified A: 0 of the 4 rows without label shares; B: 0 of" in r.stdout
    r = run("--weights", str(tmp_path / "nope.pth"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith(
        f"paired_compare.py: --weights {tmp_path / 'nope.pth'}: no such file"
    )
    # Two rows scored with different weights under one name: no one file can classify both
    # (said before the weights given are found to differ from the second's).
    for arm in arms.values():
        for seed in (0, 1):
            shutil.copy(samples, CompareDir(arm).variant(seed, 0, "gan").samples)
    rd = CompareDir(arms["b"]).variant(1, 0, "gan")
    write_json(rd.row, {"fingerprint": {"network_sha256": "f" * 64}, "row": {"fid": 8.0}})
    r = run("--weights", str(tv_weights))
    said = f"(seed 0, gan) and {arms['b']} (seed 1, gan) were scored with different networks"
    assert r.returncode == 2 and said in r.stderr and r.stderr.count("\n") == 1
    # --weights for a comparison scored with a TorchScript classifier, which holds its own.
    for arm in arms.values():
        doc = json.loads((arm / "compare.json").read_text())
        doc["scoring"]["network"] = str(save_tiny(tmp_path / "net.pt"))
        (arm / "compare.json").write_text(json.dumps(doc))
    r = run("--weights", str(tv_weights))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("paired_compare.py: --weights is for a comparison scored with")


def _run_dirs(d, seeds, fids, amp):
    """The run directories a compare directory from before 2026-11-28 holds beside its
    compare.json: each variant's config.json (its last launch's --amp), a launches.jsonl line
    that does not say, and a row.json with its row's FID."""
    from distcgan.config import TrainConfig
    from distcgan.run.comparedir import CompareDir
    from distcgan.run.rundir import write_json

    for s, fid in zip(seeds, fids, strict=True):
        for v in ("per-class", "gan"):
            rd = CompareDir(d).variant(s, seeds[0], v)
            rd.path.mkdir(parents=True)
            rd.write_config(TrainConfig(amp=amp))
            rd.append_launch({"resume": False})
            write_json(rd.row, {"fingerprint": {}, "row": {"fid": fid}})


def test_paired_compare_says_each_arms_precision_and_warns_when_they_differ(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    script = [sys.executable, str(REPO / "benchmarks" / "paired_compare.py")]
    # Rows from before 2026-11-28 have no `amp`: their run directories say (bf16).
    _compare_json(tmp_path / "old", [0, 1], [5.0, 6.0])
    _run_dirs(tmp_path / "old", [0, 1], [5.0, 6.0], "bf16")
    _compare_json(tmp_path / "new", [0, 1], [4.0, 5.0], amp="off")
    cmd = [*script, str(tmp_path / "old"), str(tmp_path / "new")]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == (
        "A: --amp bf16; B: --amp off; the arms differ in precision too: the difference is not "
        "the setting's alone"
    )
    # Known for some runs of an arm only: said, and the known ones decide. A run directory
    # gone, or trained again since its row (its row.json's FID is not the row's), says nothing.
    _compare_json(tmp_path / "gone", [0, 1], [4.0, 5.0])
    _compare_json(tmp_path / "again", [4], [7.0])
    _run_dirs(tmp_path / "again", [4], [8.0], "bf16")
    _compare_json(tmp_path / "new2", [2, 3], [4.0, 5.0], amp="off")
    arm = f"{tmp_path / 'new2'},{tmp_path / 'gone'},{tmp_path / 'again'}"
    cmd = [*script, str(tmp_path / "new"), arm, "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == "A: --amp off; B: --amp off (known for 4 of its 10 runs)"
    assert json.loads(out[-1])["amp"] == ["off", "off"]
    # One comparison whose variants trained in different precisions is not an arm's joining.
    _compare_json(tmp_path / "mixed", [0, 1], [4.0, 5.0], amp="bf16")
    doc = json.loads((tmp_path / "mixed" / "compare.json").read_text())
    doc["runs"]["1"]["gan"]["amp"] = "bf16, then off"
    (tmp_path / "mixed" / "compare.json").write_text(json.dumps(doc))
    r = subprocess.run([*script, str(tmp_path / "new"), str(tmp_path / "mixed")],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 2 and r.stderr.splitlines()[-1].endswith(
        "(seed 1, gan) trained in different precisions (--amp bf16 against bf16, then off): "
        "that comparison mixes precisions: train its runs again in one --amp"
    )


def test_a_run_says_the_precisions_it_trained_in_launch_by_launch(tmp_path):
    from distcgan.config import TrainConfig

    run = RunDir(tmp_path)
    assert run.precisions() == ""  # nothing says
    run.append_launch({"resume": False})  # a line from before 2026-11-28, and no config.json
    assert run.precisions() == ""
    run.write_config(TrainConfig(amp="bf16"))  # the last launch's
    assert run.precisions() == "bf16"  # the older line: the config's
    run.launches_file.write_text("")
    assert run.precisions() == "bf16"  # no launch recorded: the config's
    run.append_launch({"amp": "off"})
    run.append_launch({"amp": "off"})
    run.append_launch({"resume": True})  # a line from before 2026-11-28: the config's
    assert run.precisions() == "off, then bf16"
    with open(run.launches_file, "a") as fh:
        fh.write('{"amp": "fp1')  # a last line cut short by a crash: passed over
    assert run.precisions() == "off, then bf16"


def test_compare_md_says_the_precision_and_how_many_runs_say_it():
    from distcgan.compare.report import _precision_line

    def doc(*amps):  # seed 0's per-class and gan rows, seed 1's
        rows = [{"amp": a} if a else {} for a in amps]
        return {"runs": {"0": {"per-class": rows[0], "gan": rows[1]},
                         "1": {"per-class": rows[2], "gan": rows[3]}}}  # fmt: skip

    assert _precision_line(doc("off", "off", "off", "off")) == [
        "Precision (--amp): off in every run."
    ]
    assert _precision_line(doc(None, None, None, None)) == []
    assert _precision_line(doc("bf16", None, "bf16", "bf16")) == [
        "Precision (--amp): bf16 in the 3 of 4 runs that say."
    ]
    assert _precision_line(doc("off", "bf16", "off", "off")) == [
        "Precision (--amp), not the same in every run: per-class off; gan bf16 and off."
    ]


def test_an_unlabelled_panel_says_each_rows_share_so_a_collapse_shows(tmp_path, digits_file):
    # A G that draws one class almost always: its rows still fill from the rare draws, so the
    # panel says each row's share of all the draws (and no row is filled by giving up early).
    import numpy as np
    from helpers import make_samples

    from distcgan.compare.report import _share, panel_rows
    from distcgan.data import load_class

    samples = str(make_samples(digits_file, tmp_path / "s.h5", per_class=12))
    n = 3 * 12  # 12 draws in each of the 3 shares asked for
    seen = []

    def predict(images):  # every draw a 1, but the last draw of the last share a 2
        labels = np.ones(len(images), dtype=np.int64)
        if len(seen) == 2:
            labels[-1] = 2
        seen.append(len(images))
        return labels

    grid, shares = panel_rows(samples, [0, 1, 2], 4, False, predict)
    assert seen == [12, 12, 12]  # every draw was classified
    assert shares == pytest.approx([0, 35 / n, 1 / n])
    assert grid.shape[:2] == (3, 4) and (grid[0] == 96).all()  # no 0 drawn: a grey row
    assert (grid[1] == load_class(samples, 0)[:4]).all()  # the first draws said to be 1s
    assert (grid[2, 0] == load_class(samples, 2)[-1]).all() and (grid[2, 1:] == 96).all()
    grid, shares = panel_rows(samples, [0, 1, 2], 4, True, predict)  # labelled: by its labels
    assert shares is None and (grid[2] == load_class(samples, 2)[:4]).all()
    # Rows that fill from the first share: every draw is still classified for the shares...
    counted = []

    def thirds(images):
        counted.append(len(images))
        return np.arange(len(images)) % 3

    grid, shares = panel_rows(samples, [0, 1, 2], 4, False, thirds)
    assert counted == [12, 12, 12] and shares == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    # ... unless the evaluation's shares are given: then the rows stop at the first share.
    counted.clear()
    given = {"0": 0.5, "1": 0.25, "3": 0.25}
    grid, shares = panel_rows(samples, [0, 1, 2], 4, False, thirds, given)
    assert counted == [12] and shares == [0.5, 0.25, 0.0]
    assert (grid[1, 0] == load_class(samples, 0)[1]).all()
    # The shares as the figure says them, in 4 characters: none and all are told from nearly.
    said = [_share(x) for x in (0, 0.0004, 0.001, 0.098, 0.0995, 0.48, 0.996, 1.0)]
    assert said == ["0.0%", "<.1%", "0.1%", "9.8%", "10%", "48%", ">99%", "100%"]


def test_compare_png_wraps_a_title_wider_than_its_panel_so_none_runs_into_the_next(
    tmp_path, digits_file
):
    # Three samples a class at 16 px: panels 208 px wide, narrower than the DC-GAN's title
    # (rows by the network's label), which once ran on over the next panel's.
    import numpy as np
    from helpers import make_samples, save_tiny
    from PIL import Image

    from distcgan.compare.report import (
        GAP,
        LINE_H,
        MARGIN,
        SHARE_W,
        figure_size,
        save_figure,
    )
    from distcgan.data import read_info

    samples = str(make_samples(digits_file, tmp_path / "s.h5", per_class=3))
    net, info = save_tiny(tmp_path / "net.pt"), read_info(str(digits_file))
    row = {"samples": samples, "is_mean": 2.0, "is_std": 0.1, "fid": 3.0}
    variants = {v: {**row, "labelled": v != "gan"} for v in ("per-class", "gan", "cgan")}
    doc = {"classes": [0, 1, 2], "class_names": info.class_names[:3],
           "scoring": {"per_class": 3}, "variants": variants, "seeds": [0]}  # fmt: skip
    for per_class, lines in ((3, 3), (10, 2)):  # 10: wide enough, the title band as it was
        doc["scoring"]["per_class"] = per_class
        save_figure(tmp_path / "c.png", doc, str(net), info)
        fig = np.asarray(Image.open(tmp_path / "c.png").convert("L"))
        label_chars = max(map(len, doc["class_names"]))
        beside = [False, True, False]  # the DC-GAN's panel has its shares column beside it
        assert fig.shape[::-1] == figure_size(beside, 3, per_class, 16, label_chars, lines)
        # The columns between panels (the GAP before each next panel) hold no text above the
        # panels: no title or score runs from one panel's band into the next.
        panel = (per_class * 17 + 1) * 4
        x = MARGIN + 8 + 6 * max(map(len, doc["class_names"]))
        band = fig[: MARGIN + lines * LINE_H]
        for shares in (0, SHARE_W, 0):  # the DC-GAN's panel has its shares column beside it
            x += panel + shares
            # (after the last panel: the figure's right margin, narrower than a GAP)
            assert (band[:, x : x + GAP] == 255).all(), (per_class, x)
            x += GAP


def test_wrap_keeps_each_unit_whole_where_it_fits_and_breaks_it_at_spaces_where_not():
    from distcgan.compare.report import _wrap

    title = "DC-GAN (rows: the network's label; beside: its share of the draws)".split(" ")
    for width in (6, 10, 20, 80):
        lines = _wrap(title, width, len)
        assert " ".join(lines) == " ".join(title)  # nothing lost, nothing reordered
        assert all(len(x) <= width or " " not in x for x in lines)  # wider: one word alone
    assert _wrap(title, 80, len) == [" ".join(title)]
    assert _wrap(["network's"], 4, len) == ["network's"]  # a word wider than the room: alone
    score = ["IS 12.34 ± 0.10,", "FID 123.4,", "seed 0"]
    assert _wrap(score, 16, len) == ["IS 12.34 ± 0.10,", "FID 123.4,", "seed 0"]
    assert _wrap(score, 18, len) == ["IS 12.34 ± 0.10,", "FID 123.4, seed 0"]
    assert _wrap(score, 12, len) == ["IS 12.34 ±", "0.10,", "FID 123.4,", "seed 0"]


@pytest.mark.mpi
def test_a_tiny_comparison_on_two_ranks_and_its_resume(tmp_path, digits_file):
    out = tmp_path / "cmp"
    args = _compare(digits_file, out, "--classes", "0", "1", "2", "--n", "60", "--splits", "2")
    args += ["--classifier-epochs", "1", "--no-progress", "--augment", "color", "--d-bn-eps", "0.5"]
    args += ["--devices", "cpu"]  # core-seconds below, on a machine with a GPU too
    first = run_cli(*args, ranks=2)
    assert first.returncode == 0, first.stderr
    for name in ("compare.json", "compare.md", "compare.png", "classifier.pt"):
        assert (out / name).is_file(), name
    for v in VARIANTS:
        # The evaluation under the name `distcgan evaluate --run` gives it (report.py finds it).
        for name in ("summary.json", "samples.h5", "samples.png", "row.json"):
            assert (out / v / name).is_file(), (v, name)
        assert [f.name for f in RunDir(out / v).evaluations()] == ["evaluate-classifier.json"]
    assert is_unlabelled(str(out / "gan" / "samples.h5"))
    assert not is_unlabelled(str(out / "cgan" / "samples.h5"))

    doc = json.loads((out / "compare.json").read_text())
    rows = doc["variants"]
    assert list(rows) == list(VARIANTS) and doc["ranks"] == 2
    for name, row in rows.items():
        for key in ("is_mean", "is_std", "fid"):
            assert math.isfinite(row[key]), (name, key)
        assert row["n"] == 60 and row["batch"] == 16
        # An unconditional G's samples have no class, so no accuracy (README); the others do.
        assert (row["class_accuracy"] is None) == (name == "gan")
        if name != "gan":
            assert 0 <= row["class_accuracy"] <= 1
        # The per-class FID's mean: each class's samples against its own images, the measure
        # of the scores during training; no classes, none (the pooled FID says nothing of it).
        per = row["per_class_fid"]
        if name == "gan":
            assert per is None and row["fid_class_mean"] is None
        else:
            assert sorted(per) == ["0", "1", "2"]
            assert row["fid_class_mean"] == pytest.approx(sum(per.values()) / 3)
            assert row["fid_class_mean"] != pytest.approx(row["fid"])
        assert row["amp"] == "off"  # each launch of its run says its precision
        assert sum(row["label_shares"].values()) == pytest.approx(1)  # the classifier's labels
        counts = {"0": 178, "1": 182, "2": 177}  # the real images of the 3 classes
        assert row["label_tv"] == pytest.approx(label_tv(row["label_shares"], counts))
    assert "Precision (--amp): off in every run." in (out / "compare.md").read_text()
    real = doc["real"]
    assert real["n"] == 178 + 182 + 177 and 0 < real["class_accuracy"] <= 1
    assert math.isfinite(real["is_mean"]) and abs(real["fid"]) < 1e-3
    assert doc["scoring"]["classifier"]["held_out_accuracy"] is not None
    # The options over the preset that every variant trained with, recorded and said.
    options = {"augment": "color", "d_bn_eps": 0.5}
    assert doc["training"] == {"preset": "tiny", "options": options}
    for v in VARIANTS:
        config = json.loads((out / v / "config.json").read_text())
        assert {k: config[k] for k in options} == options, v

    # The budget, from what training logged: the same real images seen (3 classes x 6 steps x
    # 16), at the same effective batch, gan and cgan data-parallel over both ranks.
    assert {row["images_seen"] for row in rows.values()} == {3 * 6 * 16}
    assert {row["epochs_per_image"] for row in rows.values()} == {round(288 / 537, 4)}
    assert (rows["per-class"]["steps"], rows["gan"]["steps"], rows["cgan"]["steps"]) == (6, 18, 18)
    for v in ("gan", "cgan"):
        [task] = json.loads((out / v / "summary.json").read_text())["classes"]
        assert task["ranks"] == [0, 1] and task["effective_batch"] == 16 and task["steps"] == 18
        # Its cost: the pair's seconds times the threads of both its ranks (as env.json says).
        env = json.loads((out / v / "env.json").read_text())
        threads = sum(r["threads"] for r in env["ranks_detail"])
        rounding = 5e-4 * (threads + 1)  # each of core_s and train_s to 3 decimals
        assert task["core_s"] == pytest.approx(threads * task["train_s"], abs=rounding + 1e-9)
        assert rows[v]["device_s"] == round(task["core_s"], 1) and task["gpu_s"] == 0

    table = (out / "compare.md").read_text()
    assert table.count("\n| ") == 6  # header, rule, and 4 rows: real data + the 3 variants
    assert "n/a (no labels)" in table and "6 per class (3 pairs)" in table
    assert "| FID | FID a class (mean) | precision |" in table
    assert "| class accuracy | label TV | steps |" in table and doc["counts"] == [178, 182, 177]
    gan_line = next(line for line in table.splitlines() if line.startswith("| DC-GAN |"))
    assert f"| n/a (no labels) | {rows['gan']['label_tv']:.3f} | 18 |" in gan_line
    assert "Label TV: how far the classes the network assigns all the samples" in table
    assert "- Training: the preset `tiny`, with d_bn_eps 0.5, augment color.\n" in table
    cgan_line = next(line for line in table.splitlines() if line.startswith("| DC-CGAN"))
    assert f"| {rows['cgan']['fid']:.2f} | {rows['cgan']['fid_class_mean']:.2f} |" in cgan_line
    # Three panels of 3 rows x 10 columns of 16 px images, 1 px apart, scaled 4x: 684 x 208 px
    # each; 8 px margins, 12 px between panels, a 30 px title band, a 14 px class-name column,
    # and beside the DC-GAN's panel (rows by the classifier's label) a 32 px column of shares.
    width = 8 + 14 + 3 * 684 + 2 * 12 + 32 + 8
    assert Image.open(out / "compare.png").size == (width, 8 + 30 + 208 + 8)

    # --resume on the finished comparison: nothing is trained, sampled or scored again. Rows
    # stored before the per-class FID's mean existed (2026-11-27) get it from per_class_fid,
    # and rows stored before they said their precision (2026-11-28) get it from their run.
    for name in ("cgan", "real"):
        stored = json.loads((out / name / "row.json").read_text())
        del stored["row"]["fid_class_mean"], stored["row"]["label_tv"]  # from their shares
        if name == "cgan":
            del stored["row"]["amp"]
        (out / name / "row.json").write_text(json.dumps(stored))
    checkpoints = {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")}
    samples = {p: p.stat().st_mtime_ns for p in out.rglob("samples.h5")}
    again = run_cli("compare", "--out", str(out), "--resume", "--no-progress", ranks=2)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("trained and scored already") == 3
    assert not [e for e in events(again.stdout) if e["event"] == "class_start"]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.pt")} == checkpoints
    assert {p: p.stat().st_mtime_ns for p in out.rglob("samples.h5")} == samples
    resumed = json.loads((out / "compare.json").read_text())
    assert resumed["variants"] == rows and resumed["real"] == doc["real"]

    # Without --resume or --overwrite the directory is refused: one line, from one rank.
    third = run_cli(*args, ranks=2)
    assert third.returncode == 2
    assert third.stderr.count("already exists: pass --resume") == 1, third.stderr


def test_label_tv_is_the_same_in_every_process():
    """label_tv sums over the classes in one order: the same shares give the same bits whatever
    PYTHONHASHSEED a process draws (a set's order follows it)."""
    code = (
        "from distcgan.compare.seeds import label_tv; print(repr(label_tv("
        "{str(k): 1 / 3 if k % 3 == 0 else 0.01 * k for k in range(50)}, "
        "{k: 7 + k * k for k in range(50)})))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed), "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(6)
    }
    assert len(seen) == 1, seen
