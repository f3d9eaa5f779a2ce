"""The parallel ImageNet conversion under a real mpiexec: the same file as one process, a bad class
on any rank ends the whole job with one line and no file, and a killed conversion leaves no file
at the output path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from conftest import REPO, mpiexec
from prep_files import photo, save_as

pytestmark = pytest.mark.mpi

WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475"]
KINDS = ["rgb", "gray", "cmyk", "png", "rgb"]


def _prep(*args, ranks=None, timeout=120):
    cmd = [sys.executable, "-m", "data_prep", *args]
    if ranks is not None:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", *cmd[1:]]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def _train_folder(root, per_class=3, seed=0, scale=1):
    rng = np.random.default_rng(seed)
    for k, wnid in enumerate(WNIDS):
        for i in range(per_class + k % 2):  # uneven classes
            img = photo(rng, scale * (50 + 13 * (i % 10)), scale * (40 + 7 * k))
            save_as(img, root / wnid / f"{wnid}_{i}.JPEG", KINDS[(k + i) % len(KINDS)])
    (root.parent / "LOC_synset_mapping.txt").write_text(
        "".join(f"{w} class number {k}\n" for k, w in enumerate(WNIDS))
    )
    return root


def _content(path):
    with h5py.File(path) as f:
        attrs = {k: np.asarray(v).tolist() for k, v in f.attrs.items()}
        return attrs, {k: f[k][...] for k in ("images", "labels", "class_offsets")}


def test_parallel_conversion_gives_the_one_process_file(tmp_path):
    src = _train_folder(tmp_path / "train")
    one, two, three = tmp_path / "one.h5", tmp_path / "two.h5", tmp_path / "three.h5"
    args = ["imagenet", "--src", str(src), "--resolution", "32"]
    r1 = _prep(*args, "--out", str(one))
    assert r1.returncode == 0, r1.stderr
    r2 = _prep(*args, "--out", str(two), ranks=2)
    assert r2.returncode == 0, r2.stderr
    assert "on 2 rank(s)" in r2.stdout and r2.stdout.count("wrote ") == 1
    r3 = _prep(*args, "--out", str(three), "--classes", "4", "0", "2", ranks=3)
    assert r3.returncode == 0, r3.stderr

    attrs1, data1 = _content(one)
    attrs2, data2 = _content(two)
    assert attrs1 == attrs2
    for name in data1:
        np.testing.assert_array_equal(data1[name], data2[name])
    assert attrs1["class_names"][1] == "n01443537 class number 1"
    assert np.diff(data1["class_offsets"]).tolist() == [3, 4, 3, 4, 3]
    # Three ranks, a subset in another order: the same rows as the one-process file's classes.
    _, data3 = _content(three)
    off = data1["class_offsets"]
    expected = np.concatenate([data1["images"][off[k] : off[k + 1]] for k in (4, 0, 2)])
    np.testing.assert_array_equal(data3["images"], expected)


@pytest.mark.parametrize("bad_class", [1, 2])  # rank 1's class, then one of rank 0's
def test_a_bad_class_on_any_rank_ends_the_job_with_one_line(tmp_path, bad_class):
    src = _train_folder(tmp_path / "train")
    for path in (src / WNIDS[bad_class]).iterdir():
        path.write_bytes(b"\xff\xd8\xff truncated")
    out = tmp_path / "x.h5"
    t0 = time.monotonic()
    result = _prep("imagenet", "--src", str(src), "--out", str(out), "--resolution", "16", ranks=2)
    assert time.monotonic() - t0 < 60
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"data_prep: error: class folder {src / WNIDS[bad_class]}: ")
    assert "images are unreadable, more than --max-unreadable 0.01 allows" in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOC_synset_mapping.txt", "train"]


def test_batch_sources_refuse_several_ranks(tmp_path):
    result = _prep("digits", "--out", str(tmp_path / "d.h5"), ranks=2)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "data_prep: error: digits converts on one process: launch it without mpiexec "
        "(imagenet and folder spread classes over ranks)"
    )


def test_a_killed_conversion_leaves_no_file_at_the_output_path(tmp_path):
    src = _train_folder(tmp_path / "train", per_class=40, seed=1, scale=4)
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
