"""Fault 3: the disk fills up or the directory turns read-only while a checkpoint or a sample
file is written: a clear one-line error naming the file, a non-zero exit, the previous
checkpoint intact and no half-written file left behind.

The real cases mount a small tmpfs (or a read-only bind mount) inside an unprivileged user and
mount namespace (`unshare -rm`), so they need no root; the injected case runs everywhere."""

from __future__ import annotations

import re

import pytest
from helpers import cli_command, in_namespace, needs_userns, run_cli, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.mpi


def _no_temp_files(folder):
    return [p.name for p in folder.rglob("*.tmp")] == []


@needs_userns
@pytest.mark.launcher_neutral
def test_disk_full_while_checkpointing(tmp_path, digits_file):
    probe = tmp_path / "probe"
    assert run_cli(*tiny_args(digits_file, probe, "--classes", "0", "--steps", "3")).returncode == 0
    size = (probe / "class_000" / "checkpoint.pt").stat().st_size
    small, after = tmp_path / "small", tmp_path / "after"
    small.mkdir()
    # Room for two classes' checkpoint + previous, not for a third copy while writing.
    kib = (4 * size + (1 << 20)) // 1024
    result = in_namespace(
        f"mount -t tmpfs -o size={kib}k tmpfs {small}",
        f"cp -a {small}/run {after}",
        cli_command(
            *tiny_args(
                digits_file,
                small / "run",
                "--classes",
                "0",
                "1",
                "--steps",
                "9",
                "--checkpoint-every",
                "3",
            ),
            ranks=2,
        ),
    )
    assert result.returncode != 0
    assert "checkpoint.pt: No space left on device (free space on the file system" in result.stderr
    assert "Traceback" not in result.stderr
    # Steps 3 and 6 fit; usually the last class to write step 9 meets a full disk (the other
    # class then holds two copies). Which class, and at which step, depends on the ranks' pace,
    # so read the class off the message: its checkpoint is intact, from before the failed write.
    failed = re.search(r"distcgan: error on rank (\d) \(class (\d)\): cannot write", result.stderr)
    assert failed, result.stderr
    k_failed = int(failed.group(2))
    assert read(after / f"class_{k_failed:03d}" / "checkpoint.pt")["step"] in (3, 6)
    assert read(after / f"class_{1 - k_failed:03d}" / "checkpoint.pt")["step"] in (3, 6, 9)
    assert _no_temp_files(after / f"class_{k_failed:03d}")  # the failed write cleaned up
    # The other rank, ended by the abort, may have been killed in the middle of a write; the
    # resumed run (on a disk with room) removes what that left and finishes both classes.
    resumed = run_cli("train", "--run", str(after), "--resume", "--no-progress", ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    assert _no_temp_files(after)
    assert [read(after / f"class_{k:03d}" / "checkpoint.pt")["step"] for k in (0, 1)] == [9, 9]


@needs_userns
def test_read_only_class_directory_while_checkpointing(tmp_path, digits_file):
    run, after = tmp_path / "run", tmp_path / "after"
    common = ["--classes", "0", "1", "--checkpoint-every", "3", "--log-every", "3"]
    assert run_cli(*tiny_args(digits_file, run, *common, "--steps", "6"), ranks=2).returncode == 0
    cdir = run / "class_000"
    result = in_namespace(
        f"mount --bind {cdir} {cdir} && mount -o remount,bind,ro {cdir}",
        f"cp -a {run} {after}",
        cli_command(
            "train", "--run", str(run), "--resume", "--steps", "9", "--no-progress", ranks=2
        ),
    )
    assert result.returncode != 0
    assert "distcgan: error on rank 0 (class 0): cannot write" in result.stderr
    assert "Read-only file system" in result.stderr and "Traceback" not in result.stderr
    assert read(after / "class_000" / "checkpoint.pt")["step"] == 6


@needs_userns
@pytest.mark.launcher_neutral
def test_disk_full_while_writing_a_sample_file(tmp_path, digits_file):
    run, small = tmp_path / "run", tmp_path / "small"
    assert run_cli(*tiny_args(digits_file, run, "--classes", "0", "1")).returncode == 0
    small.mkdir()
    result = in_namespace(
        f"mount -t tmpfs -o size=64k tmpfs {small}",
        f"ls -A {small} > {tmp_path}/left.txt",
        cli_command(
            "sample", "--run", str(run), "--per-class", "500", "--out", str(small / "s.h5"), ranks=2
        ),
    )
    assert result.returncode == 2, result.stderr
    # Caught by the free-space check before HDF5 writes the class (see DatasetWriter).
    assert f"not enough space for class 0 in {small}: needs about" in result.stderr
    assert (tmp_path / "left.txt").read_text() == ""  # no partial file


@pytest.mark.launcher_neutral
def test_injected_disk_full_keeps_the_previous_checkpoint(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(
        *tiny_args(
            digits_file,
            run,
            "--classes",
            "0",
            "1",
            "--steps",
            "9",
            "--checkpoint-every",
            "3",
            "--inject-fault",
            "enospc:1:6",
        ),
        ranks=2,
    )
    assert result.returncode != 0
    assert (
        "distcgan: error on rank 1 (class 1): cannot write "
        f"{run / 'class_001' / 'checkpoint.pt'}: No space left on device"
    ) in result.stderr
    assert read(run / "class_001" / "checkpoint.pt")["step"] == 3
    # The failed write cleaned up after itself; rank 0, ended by the abort, may have been killed
    # in the middle of its own write, and the resumed launch removes what that left.
    assert _no_temp_files(run / "class_001")
    (run / "class_000" / ".checkpoint.pt.killed.tmp").write_bytes(b"half a checkpoint")
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    assert _no_temp_files(run)
    assert read(run / "class_001" / "checkpoint.pt")["step"] == 9
