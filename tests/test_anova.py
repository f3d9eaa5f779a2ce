"""`distcgan anova`: the streaming one-way ANOVA equals scipy.stats.f_oneway on a small file, on one
rank and on two, and prints a table and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import REPO, mpiexec, own_lines, run_cli
from scipy import stats

from distcgan.anova import class_moments, one_way
from distcgan.data import write_dataset
from distcgan.errors import UserError


@pytest.fixture
def rgb_file(tmp_path):
    rng = np.random.default_rng(0)
    sizes = [7, 0, 12, 3, 9]  # an empty class is left out, as f_oneway needs non-empty groups
    images, labels = [], []
    for k, n in enumerate(sizes):
        # Each class has its own mean colour, so the F statistics differ per channel.
        base = rng.integers(40, 200, 3)
        x = rng.normal(base, 30, (n, 16, 16, 3)).clip(0, 255).astype(np.uint8)
        images.append(x)
        labels += [k] * n
    path = tmp_path / "rgb.h5"
    write_dataset(path, np.concatenate(images), np.array(labels), list("abcde"), "test")
    return path, [x for x in images if len(x)]


def _scipy(groups):
    means = [g.mean(axis=(1, 2), dtype=np.float64) for g in groups]
    return [stats.f_oneway(*[m[:, c] for m in means]) for c in range(3)]


def test_one_way_matches_scipy(rgb_file):
    _, groups = rgb_file
    rows = one_way([class_moments(g) for g in groups])
    for row, ref in zip(rows, _scipy(groups)):
        assert row["F"] == pytest.approx(ref.statistic, rel=1e-10)
        assert row["p"] == pytest.approx(ref.pvalue, rel=1e-8)
        assert row["log10_p"] == pytest.approx(np.log10(ref.pvalue), rel=1e-8)
        assert (row["df_between"], row["df_within"]) == (3, 27)


def test_one_way_needs_two_classes_and_some_spread():
    one = class_moments(np.zeros((4, 2, 2, 1), np.uint8))
    with pytest.raises(UserError, match="needs at least two non-empty classes, found 1"):
        one_way([one])
    single = class_moments(np.zeros((1, 2, 2, 1), np.uint8))
    with pytest.raises(UserError, match="needs a class with more than one image"):
        one_way([single, single])


def test_no_within_class_variance_gives_a_null_f_not_infinity():
    a = class_moments(np.zeros((3, 2, 2, 1), np.uint8))
    b = class_moments(np.full((3, 2, 2, 1), 9, np.uint8))
    (row,) = one_way([a, b])
    assert row["F"] is None and row["p"] is None and row["ss_between"] > 0
    json.dumps(row, allow_nan=False)  # strict JSON


def _cli(capsys, *args):
    from distcgan.cli import main

    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.mpi
def test_cli_on_one_and_two_ranks(rgb_file, tmp_path, capsys):
    path, groups = rgb_file
    out = tmp_path / "a.json"
    code, stdout, stderr = _cli(capsys, "anova", str(path), "--json", str(out))
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"{path}: one-way ANOVA of per-image channel means over 4 classes, 31 images"
    assert lines[1].split() == ["channel", "F", "p", "log10_p", "df_between", "df_within"]
    assert [line.split()[0] for line in lines[2:5]] == ["R", "G", "B"]
    printed = json.loads(lines[-1])
    assert json.loads(out.read_text()) == printed
    for row, ref in zip(printed["channels"], _scipy(groups)):
        assert row["F"] == pytest.approx(ref.statistic, rel=1e-10)
    two = run_cli("anova", str(path), ranks=2)
    assert two.returncode == 0, two.stderr
    assert json.loads(two.stdout.splitlines()[-1]) == printed  # the same numbers, bit for bit


def test_cli_errors_are_one_line(tmp_path, capsys):
    code, _, err = _cli(capsys, "anova", str(tmp_path / "nope.h5"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "data file" in err and "does not exist" in err
    one_class = tmp_path / "one.h5"
    write_dataset(one_class, np.zeros((3, 16, 16, 1), np.uint8), np.zeros(3, int), ["a"], "t")
    code, _, err = _cli(capsys, "anova", str(one_class), "--json", str(tmp_path / "no" / "a.json"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--json {tmp_path / 'no' / 'a.json'}: folder {tmp_path / 'no'} does not exist" in err
    code, _, err = _cli(capsys, "anova", str(one_class), "--json", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--json {tmp_path} is a folder: give a file name, such as {tmp_path}/anova.json" in err
    code, _, err = _cli(capsys, "anova", str(one_class))
    assert code == 2 and "needs at least two non-empty classes, found 1" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.mpi
def test_the_json_folder_is_checked_where_rank_0_writes(rgb_file, tmp_path):
    """--json's folder is rank 0's to check: there the file is written. Each rank checked its own,
    so a rank whose node lacked the folder went to its exit without a word while the others
    waited for it in the first collective (here: the two ranks in two working folders, one with
    out/ and one without, as two nodes' local disks)."""
    path, _ = rgb_file
    has, lacks = tmp_path / "has", tmp_path / "lacks"
    (has / "out").mkdir(parents=True)
    lacks.mkdir()
    rank = [sys.executable, "-m", "mpi4py", "-m", "distcgan", "anova", str(path)]
    rank += ["--json", "out/a.json"]

    def launch(first, second):
        cmd = [mpiexec(), "-n", "1", "-wdir", str(first), *rank]
        cmd += [":", "-n", "1", "-wdir", str(second), *rank]
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    ok = launch(has, lacks)
    assert ok.returncode == 0, ok.stderr
    assert json.loads((has / "out" / "a.json").read_text())["classes"] == 4
    bad = launch(lacks, has)
    assert bad.returncode == 2, bad.stderr
    assert own_lines(bad.stderr) == [
        "distcgan: error: --json out/a.json: folder out does not exist; create it (mkdir -p out) "
        "or write elsewhere"
    ]
