"""The parallel ImageNet conversion under a real mpiexec: the same file as one process, and a bad
class on any rank ends the whole job with one line and no file."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
from helpers import REPO, WNIDS, ended_promptly, mpiexec, own_lines, run_timed
from helpers import imagenet_train_folder as _train_folder

pytestmark = pytest.mark.mpi


def _command(args, ranks):
    cmd = [sys.executable, "-m", "data_prep", *args]
    if ranks is not None:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", *cmd[1:]]
    return cmd


def _prep(*args, ranks=None, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = _command(args, ranks)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)


def _content(path):
    """The file's attributes but its provenance (which command line made it), and its data."""
    with h5py.File(path) as f:
        attrs = {k: np.asarray(v).tolist() for k, v in f.attrs.items() if k != "provenance"}
        attrs["class_names"] = [x.decode() for x in f["class_names"][...]]
        attrs["class_digests"] = f["class_digests"][...].tolist()
        made = json.loads(f.attrs["provenance"])
        assert made["command"] == "data_prep" and f"--out={path}" in "=".join(made["argv"])
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
    args = ["imagenet", "--src", str(src), "--out", str(out), "--resolution", "16"]
    result, job = run_timed(cmd=_command(args, ranks=2))
    assert result.returncode == 2, result.stderr
    assert ended_promptly(job, job.line_time("data_prep: error: class folder")) is None
    lines = own_lines(result.stderr)
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"data_prep: error: class folder {src / WNIDS[bad_class]}: ")
    assert "images are unreadable, more than --max-unreadable 0.01 allows" in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOC_synset_mapping.txt", "train"]


def test_batch_sources_refuse_several_ranks(tmp_path):
    result = _prep("digits", "--out", str(tmp_path / "d.h5"), ranks=2)
    assert result.returncode == 2
    assert own_lines(result.stderr) == [
        "data_prep: error: digits converts on one process: launch it without mpiexec "
        "(imagenet and folder spread classes over ranks)"
    ]


def test_a_bad_command_line_under_mpiexec_is_said_once_and_creates_nothing(tmp_path):
    out = tmp_path / "new" / "x.h5"  # a missing folder is made only when writing starts
    for args in (
        ["folder", "--src", str(tmp_path), "--resolution", "24"],  # checked on every rank
        ["folder", "--src", str(tmp_path / "nowhere")],  # checked on rank 0
    ):
        result = _prep(*args, "--out", str(out), ranks=2)
        assert result.returncode == 2, result.stderr
        lines = own_lines(result.stderr)
        assert len(lines) == 1 and lines[0].startswith("data_prep: error: "), result.stderr
        assert not (tmp_path / "new").exists()


def test_no_memory_for_a_received_class_ends_the_job_instead_of_hanging(tmp_path):
    """Rank 0 takes a class's header, then cannot allocate its pixels: the job ends, naming
    the error. It used to wait for that rank's next class (to answer it "stop") while the rank
    waited for its answer to the class it had sent: a hang."""
    src = _train_folder(tmp_path / "train")
    out = tmp_path / "x.h5"
    script = tmp_path / "no_memory.py"
    script.write_text(
        "import sys\n"
        "import numpy\n"
        "from mpi4py import MPI\n"
        "from data_prep import parallel\n"
        "from data_prep.__main__ import main\n"
        "from distcgan.mpi.exits import exit_process\n"
        "class NoMemory:  # rank 0's numpy, with no room for what another rank sends\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(numpy, name)\n"
        "    def empty(self, shape, dtype):\n"
        "        raise MemoryError(f'cannot allocate {shape}')\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        "    parallel.np = NoMemory()\n"
        "exit_process(main(sys.argv[1:]))\n"
    )
    cmd = [mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(script), "imagenet"]
    cmd += ["--src", str(src), "--out", str(out), "--resolution", "16"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=REPO, env=env)
    assert result.returncode != 0, result.stderr
    assert "data_prep: rank 0 failed: MemoryError: cannot allocate (4, 16, 16, 3)" in result.stderr
    assert not out.exists()
