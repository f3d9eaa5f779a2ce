"""Every input is checked before anything is deleted, created or rewritten (run/resume.py,
data.read_info): a data file whose labels disagree with its offsets anywhere (not only in the
classes trained) is refused, in one line from one rank that names the first bad row, before
--overwrite removes a run or a new run directory is made; a --resume with a data file whose
content differs from the run's (its fingerprint) or with fewer --steps than already trained is
refused in one line, and config.json and dataset.json stay as they were. Each suggested command
is run and works."""

from __future__ import annotations

import hashlib
import json
import shutil

import h5py
import numpy as np
import pytest
from helpers import own_lines, run_cli, tiny_args

from distcgan.cli import main
from distcgan.data import load_class, read_info, write_dataset

ARGS = ("--classes", "1", "2", "--devices", "cpu", "--threads", "1")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, digits_file):
    """A finished tiny run (6 steps) of classes 1 and 2, to copy."""
    run = tmp_path_factory.mktemp("resume") / "run"
    assert main(tiny_args(digits_file, run, *ARGS)) == 0
    return run


def _copy(trained, tmp_path):
    return shutil.copytree(trained, tmp_path / "run")


def _files(run) -> dict[str, bytes]:
    """Every file of the run (but the lock), by its path in the run."""
    found = sorted(p for p in run.rglob("*") if p.is_file() and p.name != ".lock")
    return {str(p.relative_to(run)): p.read_bytes() for p in found}


def _one_line(result, want: str) -> None:
    assert result.returncode == 2, result.stderr
    assert own_lines(result.stderr) == [f"distcgan: error: {want}"], result.stderr
    assert "Traceback" not in result.stderr


# ---- the data's content on --resume ----------------------------------------------------------


def _inverted(digits_file, path):
    """The digits with every pixel inverted: the same class names, counts and size."""
    info = read_info(str(digits_file))
    images = np.concatenate([load_class(str(digits_file), k) for k in range(10)])
    labels = np.repeat(np.arange(10), info.counts)
    write_dataset(path, 255 - images, labels, info.class_names, info.source)
    return path


@pytest.mark.mpi
def test_a_resume_on_data_of_other_content_is_refused_and_changes_nothing(
    trained, tmp_path, digits_file
):
    run = _copy(trained, tmp_path)
    other = _inverted(digits_file, tmp_path / "inverted.h5")
    before = _files(run)
    result = run_cli(*tiny_args(other, run, *ARGS, "--steps", "8", "--resume"), ranks=2)
    _one_line(
        result,
        f"--data {other}: class 1's images differ from those the run in {run} started with "
        f"(from {digits_file}): resume with that data file (--data {digits_file}), or train on "
        "this one as a new run (another --run, or --overwrite)",
    )
    assert _files(run) == before  # dataset.json still names the data it trained on
    # The suggested command: with the data file it started with, the run goes on.
    again = run_cli(*tiny_args(digits_file, run, *ARGS, "--steps", "8", "--resume"), ranks=2)
    assert again.returncode == 0, again.stderr
    assert json.loads((run / "config.json").read_text())["steps"] == 8


def test_the_fingerprint_is_of_the_content_and_a_run_without_one_resumes(
    trained, tmp_path, digits_file
):
    run = _copy(trained, tmp_path)
    dataset = json.loads((run / "dataset.json").read_text())
    classes = dataset["fingerprint"]["classes"]
    for k in (1, 2):  # BLAKE2b-128 of the class's image bytes, as data_prep hashes them
        images = np.ascontiguousarray(load_class(str(digits_file), k))
        assert classes[str(k)] == hashlib.blake2b(images.data, digest_size=16).hexdigest()
    assert set(classes) == {"1", "2"}  # the classes trained
    # A run written before the fingerprint existed resumes as before and then records one; the
    # same content under another name resumes too.
    del dataset["fingerprint"]
    (run / "dataset.json").write_text(json.dumps(dataset))
    moved = shutil.copy(digits_file, tmp_path / "moved.h5")
    assert main(tiny_args(moved, run, *ARGS, "--steps", "7", "--resume")) == 0
    assert json.loads((run / "dataset.json").read_text())["fingerprint"]["classes"] == classes


# ---- labels that disagree with the offsets ----------------------------------------------------


def _bad_labels(digits_file, path, label):
    """A copy of the digits whose row 3 of class 7 (not trained here) says `label`."""
    shutil.copy(digits_file, path)
    with h5py.File(path, "r+") as f:
        row = int(f["class_offsets"][7]) + 3
        f["labels"][row] = label
    return path, row


@pytest.mark.mpi
@pytest.mark.parametrize(
    "label, what",
    [
        (-1, "has label -1, which is no class (class ids run 0..9)"),
        (12, "has label 12, out of range (class ids run 0..9)"),
        (
            3,
            "has label 3 but class_offsets put it in class 7: the rows are not sorted by label, "
            "or the offsets are wrong",
        ),
    ],
)
def test_bad_labels_are_refused_before_a_run_is_deleted_or_made(
    trained, tmp_path, digits_file, label, what
):
    run = _copy(trained, tmp_path)
    before = _files(run)
    bad, row = _bad_labels(digits_file, tmp_path / "bad.h5", label)
    want = f"data file {bad}: row {row} {what}; re-create the file with python -m data_prep"
    # --overwrite: the trained run is still there, every file of it.
    _one_line(run_cli(*tiny_args(bad, run, *ARGS, "--overwrite"), ranks=2), want)
    assert _files(run) == before
    # A new run: no directory is left behind.
    fresh = tmp_path / "fresh"
    _one_line(run_cli(*tiny_args(bad, fresh, *ARGS), ranks=2), want)
    assert not fresh.exists()


# ---- fewer --steps than trained ---------------------------------------------------------------


def test_a_resume_to_fewer_steps_than_trained_is_refused(trained, tmp_path, digits_file, capsys):
    run = _copy(trained, tmp_path)
    before = _files(run)
    assert main(tiny_args(digits_file, run, *ARGS, "--steps", "3", "--resume")) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"distcgan: error: --steps 3 is below the 6 steps class_001 has already trained in {run}: "
        "a resume cannot take steps back; pass --steps 6 or more, or start a new run (another "
        "--run, or --overwrite)"
    ]
    assert _files(run) == before  # config.json still says 6 steps
    assert main(tiny_args(digits_file, run, *ARGS, "--steps", "6", "--resume")) == 0


def test_fewer_steps_than_asked_but_not_than_trained_are_allowed(trained, tmp_path, digits_file):
    """A run asked for 12 steps that stopped at 6 may be resumed to 8: no task is past 8."""
    run = _copy(trained, tmp_path)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "steps": 12}))
    assert main(tiny_args(digits_file, run, *ARGS, "--steps", "8", "--resume")) == 0
    assert json.loads((run / "config.json").read_text())["steps"] == 8
    assert json.loads((run / "summary.json").read_text())["classes"][0]["steps"] == 8
