"""data_prep --long-tail: class sizes falling geometrically from the first class to the last, each
class a seeded choice of its images (which images, exactly), from batch files and from image
folders; its one-line refusals; and the file it writes is an ordinary data file that `train`
trains on under mpiexec."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from helpers import REPO, mpiexec, run_cli, tiny_args
from PIL import Image

from data_prep.__main__ import main
from data_prep.select import (
    Selection,
    assign_rows,
    select_classes,
    tail_order,
    tail_sizes,
    with_long_tail,
)
from distcgan.data import load_class, read_info
from distcgan.errors import UserError


def _tailed(ratio: float, keep=(0, 1, 2), cap=None, seed=0) -> Selection:
    names = [f"c{k}" for k in range(max(keep) + 1)]
    return with_long_tail(select_classes(names, [str(k) for k in keep], cap), ratio, seed)


def test_sizes_fall_geometrically_from_the_smallest_class_to_it_over_the_ratio():
    # K = 3, ratio 4: the first keeps the smallest class's 90, the middle 90 / 4 ** 0.5 = 45,
    # the last 90 / 4 = 22.5, rounded down.
    assert tail_sizes(_tailed(4), [100, 120, 90]) == [90, 45, 22]
    assert tail_sizes(_tailed(4, cap=80), [100, 120, 90]) == [80, 40, 20]  # at most N
    assert tail_sizes(_tailed(1), [100, 120, 90]) == [90, 90, 90]  # ratio 1: balanced
    # The first class is the first kept, in --classes order, whatever its source id.
    assert tail_sizes(_tailed(9, keep=(2, 0, 1)), [50, 60, 70]) == [50, 16, 5]
    # Without --long-tail: each class its own, up to --max-per-class.
    assert tail_sizes(select_classes(["a", "b"], None, 5), [9, 3]) == [5, 3]


def test_the_order_depends_on_the_seed_and_the_class_only():
    order = tail_order(50, 0, 3)
    assert sorted(order.tolist()) == list(range(50))  # a permutation
    assert np.array_equal(order, tail_order(50, 0, 3))  # the same inputs, the same order
    assert not np.array_equal(order, tail_order(50, 1, 3))  # another seed
    assert not np.array_equal(order, tail_order(50, 0, 4))  # another class
    # An image's place in the order is its own key's: a class with more images keeps the
    # relative order of the first ones.
    longer = tail_order(80, 0, 3)
    assert [i for i in longer.tolist() if i < 50] == order.tolist()


def test_assign_rows_keeps_each_class_s_chosen_rows_in_the_source_order():
    rng = np.random.default_rng(0)
    labels = rng.permutation(np.repeat([0, 1, 2], [40, 30, 50]))
    sel = _tailed(4)
    target, slot, counts = assign_rows(labels, sel, "x")
    assert counts == tail_sizes(sel, [40, 30, 50]) == [30, 15, 7]
    for j in range(3):
        rows = np.flatnonzero(labels == j)
        chosen = rows[np.sort(tail_order(rows.size, 0, j)[: counts[j]])]
        assert np.flatnonzero(target == j).tolist() == chosen.tolist()
        assert slot[chosen].tolist() == list(range(counts[j]))  # written in the source's order
    # A steeper tail keeps a subset of each class's images (the same seed).
    steeper, _, _ = assign_rows(labels, _tailed(8), "x")
    assert set(np.flatnonzero(steeper == 2)) < set(np.flatnonzero(target == 2))
    other, _, _ = assign_rows(labels, _tailed(4, seed=1), "x")
    assert set(np.flatnonzero(other == 2)) != set(np.flatnonzero(target == 2))


@pytest.mark.parametrize(
    "ratio, keep, message",
    [
        (0.5, (0, 1), "--long-tail is the first class's size over the last's, a number of 1 or "
         "more; got 0.5"),
        (math.nan, (0, 1), "a number of 1 or more; got nan"),
        (math.inf, (0, 1), "a number of 1 or more; got inf"),
        (2.0, (1,), "--long-tail needs two classes or more to fall across, and 1 is kept: name "
         "more with --classes, or drop --long-tail"),
    ],
)  # fmt: skip
def test_bad_ratios_are_refused(ratio, keep, message):
    with pytest.raises(UserError) as err:
        _tailed(ratio, keep=keep)
    assert message in str(err.value)


def test_a_class_left_empty_is_refused_with_the_largest_ratio_that_works():
    with pytest.raises(UserError) as err:
        tail_sizes(_tailed(91), [100, 120, 90])
    assert str(err.value) == (
        "--long-tail 91 leaves class 2 (c2) with no images (90 / 91 is below 1): use a ratio of "
        "at most 90"
    )
    assert tail_sizes(_tailed(90), [100, 120, 90])[-1] == 1  # the hint works


def test_the_digits_long_tailed_are_the_chosen_images_of_the_full_file(tmp_path, capsys):
    full, tail = tmp_path / "full.h5", tmp_path / "tail.h5"
    assert main(["digits", "--out", str(full)]) == 0
    assert main(["digits", "--out", str(tail), "--long-tail", "10", "--seed", "3"]) == 0
    available = list(read_info(str(full)).counts)
    info = read_info(str(tail))
    sizes = tail_sizes(_tailed(10, keep=tuple(range(10))), available)
    assert list(info.counts) == sizes and sizes[0] == min(available)
    assert sizes[-1] == math.floor(min(available) / 10)  # tenfold, rounded down
    for j in range(10):
        chosen = np.sort(tail_order(available[j], 3, j)[: sizes[j]])
        assert np.array_equal(load_class(str(tail), j), load_class(str(full), j)[chosen])
    with h5py.File(tail) as f:
        made = json.loads(f.attrs["provenance"])
    assert made["options"]["long_tail"] == 10 and made["options"]["seed"] == 3
    # The same command gives the same bytes; another seed other images.
    first = tail.read_bytes()
    tail.unlink()
    assert main(["digits", "--out", str(tail), "--long-tail", "10", "--seed", "3"]) == 0
    assert tail.read_bytes() == first
    other = tmp_path / "other.h5"
    assert main(["digits", "--out", str(other), "--long-tail", "10"]) == 0
    assert not np.array_equal(load_class(str(other), 9), load_class(str(tail), 9))


def _folder(src):
    """Three class folders of 12, 9 and 10 random 16 px PNGs, named in their order."""
    rng = np.random.default_rng(5)
    for cls, n in (("a", 12), ("b", 9), ("c", 10)):
        (src / cls).mkdir(parents=True)
        for i in range(n):
            pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(src / cls / f"{i:02d}.png")
    return src


def test_an_image_folder_long_tailed_keeps_the_chosen_files_in_name_order(tmp_path):
    src = _folder(tmp_path / "imgs")
    full, tail = tmp_path / "full.h5", tmp_path / "tail.h5"
    common = ["folder", "--src", str(src), "--resolution", "16", "--no-progress"]
    assert main([*common, "--out", str(full)]) == 0
    assert main([*common, "--out", str(tail), "--long-tail", "3", "--classes", "c", "a", "b"]) == 0
    info = read_info(str(tail))
    # The first kept (c) starts from the smallest class's 9: 9, 9 / 3 ** 0.5 = 5.2, 3.
    assert info.class_names == ("c", "a", "b") and list(info.counts) == [9, 5, 3]
    for j, (k, n) in enumerate(((2, 10), (0, 12), (1, 9))):
        chosen = np.sort(tail_order(n, 0, k)[: info.counts[j]])
        assert np.array_equal(load_class(str(tail), j), load_class(str(full), k)[chosen])


@pytest.mark.mpi
def test_an_image_folder_long_tailed_on_three_ranks_is_the_one_process_file(tmp_path):
    src = _folder(tmp_path / "imgs")
    args = ["folder", "--src", str(src), "--resolution", "16", "--long-tail", "3", "--seed", "2"]
    one, three = tmp_path / "one.h5", tmp_path / "three.h5"
    assert main([*args, "--no-progress", "--out", str(one)]) == 0
    cmd = [mpiexec(), "-n", "3", sys.executable, "-m", "mpi4py", "-m", "data_prep", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [*cmd, "--out", str(three)], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "on 3 rank(s)" in done.stdout
    assert read_info(str(three)).counts == read_info(str(one)).counts == (9, 5, 3)
    for j in range(3):  # class j converted by rank j, the same images as one process chose
        assert np.array_equal(load_class(str(three), j), load_class(str(one), j))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--long-tail", "0.9"], "--long-tail is the first class's size over the last's, a "
         "number of 1 or more; got 0.9"),
        (["--long-tail", "500"], "--long-tail 500 leaves class 9 (9) with no images (174 / 500 "
         "is below 1): use a ratio of at most 174"),
        (["--seed", "1"], "--seed applies to --long-tail only (the other options keep the first "
         "images)"),
        (["--long-tail", "2", "--classes", "4"], "--long-tail needs two classes or more"),
        (["--long-tail", "ten"], "argument --long-tail: invalid float value: 'ten'"),
    ],
)  # fmt: skip
def test_bad_command_lines_give_one_line(tmp_path, capsys, args, message):
    out = tmp_path / "o.h5"
    assert main(["digits", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("data_prep: error: ") and len(err.strip().splitlines()) == 1, err
    assert message in err, err
    assert not out.exists()


@pytest.mark.mpi
def test_train_trains_every_class_of_a_long_tailed_file(tmp_path):
    data, run = tmp_path / "tail.h5", tmp_path / "run"
    assert main(["digits", "--out", str(data), "--long-tail", "10"]) == 0
    done = run_cli(*tiny_args(data, run, "--steps", "2", "--classes", "0", "9"), ranks=2)
    assert done.returncode == 0, done.stderr
    rows = json.loads((run / "summary.json").read_text())["classes"]
    counts = read_info(str(data)).counts
    assert [(r["class_id"], r["status"], r["steps"]) for r in rows] == [
        (0, "done", 2),
        (9, "done", 2),
    ]
    assert [r["images"] for r in rows] == [counts[0], counts[9]]  # 10 to 1
