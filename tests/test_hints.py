"""Every hint is a command that works: each test here gets a message that advises a command, checks
the message exactly, then runs what it advises and checks that it is accepted. (Found broken:
"pass --resolution 32" and "rerun with --resume and a lower lr", both refused by --resume; bench
advising a --devices flag it lacks; "format None" for a run directory given as an export; "needs
about 0.1 MB, 0.1 MB free" on a full disk; "python -m data_prep ... --resolution R" for data of
a size the model does not take.)"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
import torch
from helpers import REPO, run_cli, tiny_args

from distcgan.data import PROVENANCE, DatasetWriter
from distcgan.errors import UserError
from distcgan.run.atomic import check_free_space

ONE = ("--classes", "0", "--steps", "2", "--devices", "cpu")


def _fails(result, line):
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"distcgan: error: {line}"


def test_data_at_another_resolution_new_run_and_resume(tmp_path, digits_file):
    px32 = tmp_path / "digits32.h5"
    made = _data_prep(px32)
    assert made.returncode == 0, made.stderr
    run, new = tmp_path / "run", tmp_path / "new"
    # A new run: the resolution follows the data, as advised.
    _fails(
        run_cli(*tiny_args(px32, new, *ONE)),
        f"data file {px32} holds 32 px images but the config asks for 16 px: pass --resolution "
        "32 or prepare the data at 16 px",
    )
    assert run_cli(*tiny_args(px32, new, *ONE, "--resolution", "32")).returncode == 0
    # A resume cannot change its resolution: the advice is its own data file.
    assert run_cli(*tiny_args(digits_file, run, *ONE)).returncode == 0
    resume = ("train", "--run", str(run), "--resume", "--no-progress", "--steps", "3")
    _fails(
        run_cli(*resume, "--data", str(px32)),
        f"data file {px32} holds 32 px images but this run trains at 16 px: resume without "
        "--data, with the data file the run started with",
    )
    again = run_cli(*resume)
    assert again.returncode == 0, again.stderr


def _data_prep(out):
    cmd = [sys.executable, "-m", "data_prep", "digits", "--out", str(out), "--resolution", "32"]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)


def _eight_px(path, source, made=None):
    """Two classes of 8 px images, as an older converter or the user's own code wrote them."""
    attrs = {PROVENANCE: json.dumps(made)} if made else {}
    rng = np.random.default_rng(0)
    with DatasetWriter(path, ["0", "1"], 8, 1, source, attrs=attrs) as w:
        for k in range(2):
            w.add_class(k, rng.integers(0, 256, (20, 8, 8, 1), dtype=np.uint8))
    return path


def test_data_at_a_size_the_model_does_not_take(tmp_path):
    """The advice is a data_prep command of the file's own source and options (from its
    provenance, or its source), writing a new file beside it; run, then trained on."""
    line = ["python", "-m", "data_prep", "digits", "--out", "x.h5", "--resolution", "8",
            "--classes", "0", "1", "--overwrite"]  # fmt: skip
    made = _eight_px(tmp_path / "made.h5", "sklearn-digits", {"command": "data_prep", "argv": line})
    bare = _eight_px(tmp_path / "bare.h5", "sklearn-digits")
    for data, args in ((made, "digits --classes 0 1"), (bare, "digits")):
        new = tmp_path / f"{data.stem}-16px.h5"
        command = f"python -m data_prep {args} --out {new} --resolution 16"
        _fails(
            run_cli(*tiny_args(data, tmp_path / "run", *ONE)),
            f"data file {data} holds 8 px images, which the model does not support: write it "
            f"again at 16 px with {command}, then pass --data {new}",
        )
        argv = shlex.split(command)
        done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stderr
        trained = run_cli(*tiny_args(new, tmp_path / f"run-{data.stem}", *ONE))
        assert trained.returncode == 0, trained.stderr
    # Made by something else: no command is guessed.
    other = _eight_px(tmp_path / "other.h5", "my-scans")
    _fails(
        run_cli(*tiny_args(other, tmp_path / "run", *ONE)),
        f"data file {other} holds 8 px images, which the model does not support: write it again "
        "at one of 16, 32, 64 px with data_prep's --resolution (docs/data.md)",
    )
    assert not (tmp_path / "run").exists()


def test_a_class_that_diverges_for_good(tmp_path, digits_file):
    run = tmp_path / "run"
    fault = ("--inject-fault", "nan-always:0:2", "--max-retries", "0")
    diverged = run_cli(*tiny_args(digits_file, run, *ONE[:2], "--steps", "6", *fault))
    assert diverged.returncode == 3
    said = [x for x in diverged.stderr.splitlines() if "class 0 diverged" in x]
    assert len(said) == 1 and said[0].endswith(
        "after 0 rollback(s); rerun with --resume --max-retries 2 (each rollback draws new "
        "noise), or start a new --run with a lower --lr-d/--lr-g"
    ), diverged.stderr
    resumed = run_cli("train", "--run", str(run), "--resume", "--no-progress", "--max-retries", "2")
    assert resumed.returncode == 0, resumed.stderr
    lower = ("--lr-d", "0.0001", "--lr-g", "0.0001")
    fresh = run_cli(*tiny_args(digits_file, tmp_path / "new", *ONE, *lower))
    assert fresh.returncode == 0, fresh.stderr


def test_bench_names_its_own_device_flag(tmp_path):
    gpus = torch.cuda.device_count()
    _fails(
        run_cli("bench", "--device-g", "cuda:64"),
        f"--device-g: devices 'cuda:64' asks for cuda:64 but rank sees {gpus} GPU(s): check "
        "CUDA_VISIBLE_DEVICES and the launcher's GPUs per task, or use --device-g auto",
    )
    small = ("--windows", "1", "--steps", "1", "--warmup", "0", "--batch-size", "4")
    ran = run_cli("bench", "--device-g", "auto", *small)
    assert ran.returncode == 0, ran.stderr


def test_a_run_directory_given_as_an_export(tmp_path, digits_file):
    run, export, png = tmp_path / "run", tmp_path / "export", tmp_path / "x.png"
    assert run_cli(*tiny_args(digits_file, run, *ONE)).returncode == 0
    generate = ("generate", "--class", "0", "--n", "2", "--out", str(png))
    _fails(
        run_cli(*generate, "--model", str(run)),
        f"{run} is a run directory, not an export: export it first with python -m distcgan "
        f"export --run {run} --out DIR, then give DIR",
    )
    exported = run_cli("export", "--run", str(run), "--out", str(export))
    assert exported.returncode == 0, exported.stderr
    made = run_cli(*generate, "--model", str(export))
    assert made.returncode == 0 and png.is_file(), made.stderr


def test_a_full_disk_says_the_space_it_asks_for(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10**9, 10**9, 100_000))
    with pytest.raises(UserError) as caught:
        check_free_space(tmp_path, 100_000, "class 0")
    assert str(caught.value) == (
        f"not enough space for class 0 in {tmp_path}: needs about 1.15 MB (0.10 MB of data and "
        "headroom), 0.10 MB free; free some space or write elsewhere"
    )
    # The figure said is the one compared: 1.15 MB fits in 2 MB.
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10**9, 10**9, 2_000_000))
    check_free_space(tmp_path, 100_000, "class 0")
