"""data_prep's shared steps: the resize helper, class selection, the pass plan, the verified and
atomic output (a killed conversion leaves no file), and the command line's one-line errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from helpers import REPO, imagenet_train_folder
from PIL import Image

from data_prep.__main__ import main
from data_prep.output import Output
from data_prep.resize import fit_array, fit_square
from data_prep.select import assign_rows, plan_groups, select_classes
from distcgan.data import read_info
from distcgan.errors import UserError


def test_fit_square_keeps_exact_sizes_and_box_averages_when_shrinking():
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    assert np.array_equal(np.asarray(fit_square(Image.fromarray(img), 32)), img)
    # 2x2 blocks of one colour: halving with an area filter gives back the blocks exactly.
    blocks = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
    big = blocks.repeat(2, axis=0).repeat(2, axis=1)
    assert np.array_equal(np.asarray(fit_square(Image.fromarray(big), 16)), blocks)
    # Not a power of two: each output pixel is the mean of the 3x3 source pixels it covers.
    src = rng.integers(0, 256, (48, 48), dtype=np.uint8)
    out = np.asarray(fit_square(Image.fromarray(src), 16)).astype(float)
    means = src.reshape(16, 3, 16, 3).mean(axis=(1, 3))
    assert np.abs(out - means).max() <= 1.0  # PIL computes in fixed point


def test_fit_square_takes_the_central_square_of_the_shorter_side():
    rng = np.random.default_rng(1)
    centre = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    wide = np.zeros((64, 96, 3), np.uint8)  # 96 wide, 64 high: 16 px bands left and right
    wide[:, :16] = 255
    wide[:, 16:80] = centre.repeat(2, axis=0).repeat(2, axis=1)
    assert np.array_equal(np.asarray(fit_square(Image.fromarray(wide), 32)), centre)
    tall = np.ascontiguousarray(wide.transpose(1, 0, 2))
    assert np.array_equal(
        np.asarray(fit_square(Image.fromarray(tall), 32)), centre.transpose(1, 0, 2)
    )


def test_fit_array_enlarges_bilinearly_and_keeps_channels():
    rng = np.random.default_rng(2)
    small = rng.integers(0, 256, (3, 8, 8, 1), dtype=np.uint8)
    out = fit_array(small, 16)
    assert out.shape == (3, 16, 16, 1)
    ref = Image.fromarray(small[1, :, :, 0]).resize((16, 16), Image.Resampling.BILINEAR)
    assert np.array_equal(out[1, :, :, 0], np.asarray(ref))
    assert fit_array(small, 8) is small


def test_select_classes_by_id_or_name_renumbered_in_the_given_order():
    names = ["cat", "dog", "emu"]
    sel = select_classes(names, ["emu", "0"], 5)
    assert sel.keep == (2, 0) and sel.names == ("emu", "cat") and sel.cap == 5
    assert select_classes(names, None, None).keep == (0, 1, 2)
    folders = select_classes(["a", "b"], ["b"], None, keys=["n1", "n2"])
    assert folders.keep == (1,)
    assert select_classes(["x", "y"], ["n2"], None, keys=["n1", "n2"]).keep == (1,)


@pytest.mark.parametrize(
    "names, classes, cap, message",
    [
        (["a", "b"], ["2"], None, "--classes 2 is out of range: the source has classes 0..1"),
        (["a", "b"], ["c"], None, "--classes 'c' is neither a class id nor a class name"),
        (["a", "b"], ["a", "0"], None, "--classes names class 0 (a) twice"),
        (["a", "a"], None, None, "has two classes named 'a' (ids 0 and 1)"),
        (["a", "b"], None, 0, "--max-per-class must be a positive number of images, got 0"),
    ],
)
def test_select_classes_errors(names, classes, cap, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        select_classes(names, classes, cap)


def test_numeric_names_are_matched_as_names_first():
    sel = select_classes(["001", "002", "003"], ["1", "003"], None)
    assert sel.keep == (1, 2)  # "1" is no name: id 1 ("002"); "003" is a name: id 2


def test_assign_rows_keeps_the_first_rows_of_each_class_in_order():
    labels = np.array([2, 0, 2, 1, 0, 2, 2])
    sel = select_classes(["a", "b", "c"], ["c", "a"], 2)
    target, slot, counts = assign_rows(labels, sel, "x")
    assert counts == [2, 2]
    assert target.tolist() == [0, 1, 0, -1, 1, -1, -1]
    assert slot[[0, 2]].tolist() == [0, 1] and slot[[1, 4]].tolist() == [0, 1]
    with pytest.raises(UserError, match="x has no images of class 1 \\(b\\): the source is"):
        assign_rows(labels[labels != 1], select_classes(["a", "b", "c"], None, None), "x")


def test_plan_groups_fill_the_budget_in_class_order():
    assert plan_groups([3, 3, 3, 3], 10, 60) == [range(0, 2), range(2, 4)]
    assert plan_groups([3, 3, 3, 3], 10, 1000) == [range(0, 4)]
    # A class larger than the budget still goes, alone; nothing is dropped or reordered.
    assert plan_groups([1, 9, 1, 1], 10, 25) == [range(0, 1), range(1, 2), range(2, 4)]
    assert plan_groups([], 10, 25) == []


def _imgs(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 16, 16, 1), dtype=np.uint8)


def test_output_verifies_before_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "d.h5"
    with Output(path, ["a", "b"], 16, 1, "t") as w:
        w.add_class(0, _imgs(3))
        w.add_class(1, _imgs(2, 1))
    assert read_info(str(path)).counts == (3, 2)

    # Storage that returns other bytes than were written: the check catches it before the
    # rename, and the previous file stays as it was.
    before = path.read_bytes()
    import data_prep.output as output

    real = output.load_class
    monkeypatch.setattr(
        output, "load_class", lambda p, k, **kw: real(p, k, **kw) ^ np.uint8(k == 1)
    )
    with pytest.raises(UserError, match="class 1's images read back differ from those written"):
        with Output(path, ["a", "b"], 16, 1, "t2") as w:
            w.add_class(0, _imgs(3))
            w.add_class(1, _imgs(2, 1))
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.h5"]  # no temporary left


def test_output_refuses_an_empty_class_and_leaves_nothing(tmp_path):
    with pytest.raises(UserError, match=r"class 1 \(b\) has no images"):
        with Output(tmp_path / "d.h5", ["a", "b"], 16, 1, "t") as w:
            w.add_class(0, _imgs(3))
            w.add_class(1, _imgs(0))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["digits", "--resolution", "24"], "--resolution 24 is not supported: use one of"),
        (["digits", "--src", "x"], "digits are embedded in scikit-learn: drop --src"),
        (["mnist"], "mnist needs --src: the downloaded file or folder"),
        (["digits", "--split", "test"], "--split does not apply to digits: there is no split"),
        (["folder", "--src", ".", "--split", "test"], "point --src at the split's folder"),
        (["mnist", "--src", ".", "--coarse"], "--coarse applies to cifar100 only"),
        (["cifar10", "--src", ".", "--max-unreadable", "0.1"], "applies to imagenet and folder"),
        (["folder", "--src", ".", "--max-unreadable", "1.5"], "is a fraction in [0, 1), got 1.5"),
        (["folder", "--src", ".", "--memory-mb", "9"], "--memory-mb applies to batch-file"),
        (["nope"], "argument SOURCE: invalid choice: 'nope'"),
        (["digits", "--out", "/dev/null/d.h5"], "/dev/null is not a folder: write elsewhere"),
        (["mnist", "--src", "nowhere"], "no train-images IDX file in nowhere: expected"),
        (["cifar10", "--src", "nowhere"], "--src nowhere does not exist: give the downloaded"),
    ],
)
def test_bad_command_lines_give_one_line(tmp_path, capsys, args, message):
    argv = args if "--out" in args else [*args, "--out", str(tmp_path / "o.h5")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.startswith("data_prep: error: ") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o.h5").exists()


def test_the_output_folder_is_created(tmp_path):
    out = tmp_path / "new" / "data" / "d.h5"  # as data/ on a fresh clone
    assert main(["digits", "--out", str(out), "--max-per-class", "3"]) == 0
    assert list(read_info(str(out)).counts) == [3] * 10


def test_help_lists_every_source_and_errors_have_no_traceback(tmp_path):
    def run(*args):
        cmd = [sys.executable, "-m", "data_prep", *args]
        return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)

    out = run("--help").stdout
    for source in ("mnist", "fashion-mnist", "cifar10", "cifar100", "imagenet", "imagenet-npz"):
        assert f"\n  {source} " in out
    assert "\n  folder " in out and "\n  digits " in out
    bad = run("cifar10", "--src", str(tmp_path), "--out", str(tmp_path / "c.h5"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip() == (
        f"data_prep: error: no CIFAR files in {tmp_path}: expected cifar-10-batches-py/ (with "
        "batches.meta) or cifar-10-python.tar.gz; point --src at the archive or the folder"
    )


def test_digits_file_layout_is_the_contract(tmp_path):
    out = tmp_path / "d.h5"
    assert main(["digits", "--out", str(out), "--classes", "3", "1"]) == 0
    with h5py.File(out) as f:
        assert f["images"].dtype == np.uint8 and f["images"].shape[1:] == (16, 16, 1)
        assert f["class_names"][...].tolist() == [b"3", b"1"]
        offsets = f["class_offsets"][...]
        labels = f["labels"][...]
        assert np.array_equal(labels, np.repeat([0, 1], np.diff(offsets)))
        assert f.attrs["source"] == b"sklearn-digits" and f.attrs["resolution"] == 16


def test_a_killed_conversion_leaves_no_file_at_the_output_path(tmp_path):
    src = imagenet_train_folder(tmp_path / "train", per_class=40, seed=1, scale=4)
    out = tmp_path / "big.h5"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "data_prep", "folder", "--src", str(src), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".big.h5.*.tmp")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.002)
        # Freeze it mid-conversion (the temporary file is open), then kill it.
        proc.send_signal(signal.SIGSTOP)
        assert proc.poll() is None, "the conversion finished before it could be killed"
        assert not out.exists()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    # Only the hidden temporary is left: no name a user or the trainer would take for data.
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".h5")] == []
    assert len(list(tmp_path.glob(".big.h5.*.tmp"))) == 1


def test_a_data_file_says_what_made_it_and_the_same_conversion_is_the_same_file(tmp_path):
    # Its provenance: the options and command line, the versions and commit, but no time nor
    # host, so the same conversion twice gives the same bytes (the real statistics' cache beside
    # a data file goes by its SHA-256).
    import json

    out = tmp_path / "d.h5"
    argv = ["digits", "--out", str(out), "--classes", "3", "7"]
    assert main(argv) == 0
    first = out.read_bytes()
    with h5py.File(out) as f:
        made = json.loads(f.attrs["provenance"])
    assert made["command"] == "data_prep" and made["argv"] == ["python", "-m", "data_prep", *argv]
    assert made["options"]["source"] == "digits" and made["options"]["classes"] == ["3", "7"]
    assert {"distcgan", "git_commit", "python", "torch"} <= set(made)
    assert not {"time_utc", "host"} & set(made)
    time.sleep(1.1)  # a record stamped to the second would now differ
    out.unlink()
    assert main(argv) == 0
    assert out.read_bytes() == first
