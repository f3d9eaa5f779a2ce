"""A data file can no longer hang a job: HDF5 loops for ever reading a variable-length string
from a global heap whose free-space object reads as size 0 (H5HG__cache_heap_deserialize does
not advance; a flipped byte in that size, or in an object's size before it, which moves the
parser into the zeroed free space, does it). Format 1 files (data_prep's before format 2) kept
their class names and source there: `info`, `train` and `evaluate` never ended on such a file.

Format 2 files hold no variable-length string (class names in a dataset of fixed-length
strings), so their reading starts no other process; a format 1 file's strings are read in a
child process with a time limit, and a damaged heap is one line that names the file, exit 2.
The time limit is shortened here by setting it in the process that runs the command (a test
hook outside the code), so that each looping case costs seconds; the undamaged format 1 file is
still read with it, names and all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from helpers import REPO, own_lines

pytestmark = pytest.mark.slow

LIMIT_S = 15  # the child's limit in these runs: its start takes well under a second
# Runs each argv of argv[1] through distcgan.cli.main with the strings' limit shortened, stderr
# captured at the file descriptor; writes [{rc, stderr}] to argv[2].
DRIVER = r"""
import json, os, sys, tempfile
import distcgan.data
from distcgan.cli import main

distcgan.data.STRINGS_TIMEOUT_S = float(sys.argv[3])

def run(argv):
    saved = os.dup(2)
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        os.dup2(err.fileno(), 2)
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return {"rc": rc, "stderr": err.read().decode(errors="replace")}

cases = json.loads(open(sys.argv[1]).read())
json.dump([run(argv) for argv in cases], open(sys.argv[2], "w"))
"""


def run_cases(tmp: Path, cases: list[list[str]], timeout: float) -> list[dict]:
    todo, done = tmp / "cases.json", tmp / "results.json"
    todo.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", DRIVER, str(todo), str(done), str(LIMIT_S)]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the commands did not end within {timeout} s: HDF5 loops on a damaged heap")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(done.read_text())


def format1_file(path: Path, digits: Path) -> Path:
    """The digits as data_prep wrote them in format 1: class names, source and provenance as
    variable-length strings (attributes), no digests."""
    with h5py.File(digits) as src, h5py.File(path, "w") as f:
        for name in ("images", "labels", "class_offsets"):
            src.copy(src[name], f, name)
        f.attrs["class_names"] = [str(k) for k in range(10)]
        f.attrs["source"] = "sklearn-digits"
        f.attrs["resolution"] = 16
        f.attrs["format_version"] = 1
        f.attrs["provenance"] = json.dumps({"command": "data_prep"})
    return path


def heap_sizes(data: bytes) -> tuple[list[int], int]:
    """The positions of the size fields of the objects of the file's (one) global heap, and
    that of its free-space object (index 0)."""
    at = data.find(b"GCOL")
    assert at > 0 and data.find(b"GCOL", at + 1) < 0
    end, p, sizes = at + int.from_bytes(data[at + 8 : at + 16], "little"), at + 16, []
    while p + 16 <= end:
        index, size = int.from_bytes(data[p : p + 2], "little"), data[p + 8 : p + 16]
        if index == 0:
            return sizes, p + 8
        sizes.append(p + 8)
        p += 16 + (int.from_bytes(size, "little") + 7) // 8 * 8
    raise AssertionError("no free-space object")


def flipped(src: Path, dst: Path, pos: int, mask: int = 0xFF) -> Path:
    data = bytearray(src.read_bytes())
    data[pos] ^= mask
    dst.write_bytes(bytes(data))
    return dst


def test_a_damaged_string_heap_of_a_format_1_file_ends_in_one_line(digits_file, tmp_path):
    old = format1_file(tmp_path / "old.h5", digits_file)
    objects, free = heap_sizes(old.read_bytes())
    # The free space's size (seen to loop: bits 0xFF, 0x80 and 0x10 of its low byte) and each
    # object's size, which moves the parser elsewhere (the last one into the free space).
    plan = [(free, 0xFF), (free, 0x10), *((p, 0x01) for p in objects[::4]), (objects[-1], 0x08)]
    copies = [flipped(old, tmp_path / f"d{i}.h5", p, m) for i, (p, m) in enumerate(plan)]
    run = tmp_path / "run"
    train = ["train", "--preset", "tiny", "--classes", "0", "--steps", "1", "--devices", "cpu"]
    cases = [["info", str(old)], *(["info", str(c)] for c in copies)]
    cases += [[*train, "--data", str(copies[0]), "--run", str(run), "--no-progress"]]
    results = run_cases(tmp_path, cases, timeout=120 + LIMIT_S * len(cases))
    assert results[0]["rc"] == 0, results[0]["stderr"][-2000:]
    looped = 0
    for (pos, _), copy, result in zip(plan + plan[:1], copies + copies[:1], results[1:]):
        lines = own_lines(result["stderr"])
        if result["rc"] == 0:  # a byte that did not matter
            assert lines == [], (pos, result["stderr"][-2000:])
            continue
        assert result["rc"] == 2 and "Traceback" not in result["stderr"], (pos, result)
        assert len(lines) == 1 and f"data file {copy} cannot be read, it is damaged" in lines[0]
        looped += f"did not end in {LIMIT_S} s" in lines[0]
    assert looped >= 3  # the free space's size twice, and the train job's
    assert not run.exists()  # refused before the run directory is made


def test_a_format_1_file_is_still_read_and_a_format_2_file_needs_no_child(
    digits_file, tmp_path, monkeypatch
):
    from distcgan import data

    old = format1_file(tmp_path / "old.h5", digits_file)
    new, was = data.read_info(str(digits_file)), data.read_info(str(old))
    assert was.class_names == new.class_names == tuple(str(k) for k in range(10))
    assert (was.source, was.counts) == (new.source, new.counts)
    three = data.load_class(str(digits_file), 3)
    np.testing.assert_array_equal(data.load_class(str(old), 3), three)
    with h5py.File(digits_file) as f:  # nothing of format 2 lives in the global heap
        assert f.attrs["format_version"] == 2
        assert all(not isinstance(v, str) for v in f.attrs.values())
    assert b"GCOL" not in digits_file.read_bytes()

    def no_child(*args, **kwargs):
        raise AssertionError("a format 2 file started a process")

    monkeypatch.setattr(subprocess, "run", no_child)
    assert data.read_info(str(digits_file)) == new
