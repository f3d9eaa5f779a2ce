"""`distcgan sample` streams classes to rank 0: one class in memory at a time, any rank count."""

from __future__ import annotations

import shutil
import weakref

import numpy as np
import pytest
from helpers import own_lines, run_cli, tiny_args

from distcgan.cli import main
from distcgan.data import load_class, read_info
from distcgan.eval.sampling import sample


@pytest.fixture(scope="module")
def run(tmp_path_factory, digits_file):
    path = tmp_path_factory.mktemp("stream") / "run"
    assert main(tiny_args(digits_file, path, "--classes", "1", "4", "6", "9")) == 0
    return path


def test_sampling_holds_one_class_at_a_time(tmp_path, run, monkeypatch):
    # Count the class arrays alive at once: each generated class is freed once it is written.
    alive: set[int] = set()
    most = []

    def generate(G, n, z_dim, seed, device):
        images = real_generate(G, n, z_dim, seed, device)
        alive.add(id(images))
        weakref.finalize(images, alive.discard, id(images))
        most.append(len(alive))
        return images

    real_generate = sample.generate
    monkeypatch.setattr(sample, "generate", generate)
    args = ["sample", "--run", str(run), "--per-class", "25", "--out", str(tmp_path / "s.h5")]
    assert main(args) == 0
    assert most == [1, 1, 1, 1]  # gathering the classes first would give [1, 2, 3, 4]
    assert read_info(str(tmp_path / "s.h5")).counts == (0, 25, 0, 0, 25, 0, 25, 0, 0, 25)


@pytest.mark.mpi
def test_three_ranks_write_the_one_process_file(tmp_path, run):
    one, three = tmp_path / "one.h5", tmp_path / "three.h5"
    args = ["sample", "--run", str(run), "--per-class", "7"]
    assert main([*args, "--out", str(one)]) == 0
    result = run_cli(*args, "--out", str(three), ranks=3)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("wrote") == 1 and three.with_suffix(".png").is_file()
    for k in (1, 4, 6, 9):
        assert np.array_equal(load_class(str(one), k), load_class(str(three), k)), k


@pytest.mark.mpi
@pytest.mark.parametrize(
    "args, message",
    [
        (["--per-class", "0", "--out", "s.h5"], "--per-class must be a positive integer, got 0"),
        (["--per-class", "2", "--out", "s.png"], "--out s.png is also the grid's file, which"),
        (
            ["--per-class", "2", "--out", "s.h5", "--grid", "./s.h5"],
            "--out s.h5 is also the grid's file, which would replace the samples: give --out",
        ),
    ],
)
def test_a_bad_sample_command_is_one_line_under_mpiexec(tmp_path, run, args, message):
    # --out s.png wrote the samples, then the grid (default: OUT with .png) over them.
    result = run_cli("sample", "--run", str(run), *args, ranks=2, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(own_lines(result.stderr)) == 1, result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.mpi
@pytest.mark.parametrize(
    "args, message",
    [
        (["--out", "out"], "--out out is a folder: give a file name, such as out/samples.h5"),
        (["--out", "no/s.h5"], "--out no/s.h5: folder no does not exist; create it (mkdir -p no)"),
        (
            ["--out", "s.h5", "--devices", "gpu"],
            "sample --devices 'gpu' is not understood: use auto, cpu or cuda:N",
        ),
        (  # a rank samples on one device: D's half of a pair went unused without a word
            ["--out", "s.h5", "--devices", "cpu,cpu"],
            "sample --devices 'cpu,cpu' is not understood: use auto, cpu or cuda:N",
        ),
    ],
)
def test_a_bad_place_or_device_for_sample_is_one_line_under_mpiexec(tmp_path, run, args, message):
    # A folder as --out failed only at the rename, with IsADirectoryError, after every class ran.
    (tmp_path / "out").mkdir()
    result = run_cli("sample", "--run", str(run), "--per-class", "2", *args, ranks=2, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "out"]
    assert list((tmp_path / "out").iterdir()) == []


def test_sample_replaces_only_its_own_sample_files(tmp_path, run, digits_file, capsys):
    """`sample --out data.h5` wrote the samples over the run's training data without a word; an
    existing file is now refused unless --overwrite, and even with it a file that is not a
    sample file is refused, while a sample file is replaced. A grid not named .png was written
    as PNG under that name."""
    data = tmp_path / "data.h5"
    shutil.copy(digits_file, data)
    notes = tmp_path / "notes.h5"
    notes.write_text("mine")
    base = ["sample", "--run", str(run), "--per-class", "3"]
    for target, what in ((data, "a data set (sklearn-digits)"), (notes, "not a sample file")):
        assert main([*base, "--out", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"distcgan: error: --out {target} already exists: add --overwrite to replace it, or "
            "give another --out"
        ], err
        assert main([*base, "--out", str(target), "--overwrite"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"distcgan: error: --out {target} exists and is {what}: only a sample file of "
            "distcgan sample or generate is replaced; give another file name"
        ], err
    assert data.read_bytes() == digits_file.read_bytes() and notes.read_text() == "mine"
    out = tmp_path / "s.h5"
    assert main([*base, "--out", str(out)]) == 0
    assert main([*base, "--per-class", "5", "--out", str(out)]) == 2  # a rerun: told first
    assert "already exists: add --overwrite" in capsys.readouterr().err
    assert main([*base, "--per-class", "5", "--out", str(out), "--overwrite"]) == 0  # replaced
    assert read_info(str(out)).counts[1] == 5
    assert main([*base, "--out", str(tmp_path / "t.h5"), "--grid", str(tmp_path / "g.jpg")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "g.jpg: the grid is a PNG image; give a .png name" in err[0], err
    assert not (tmp_path / "t.h5").exists() and not (tmp_path / "g.jpg").exists()
