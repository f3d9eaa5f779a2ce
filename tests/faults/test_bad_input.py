"""Bad input: each case gives one line on stderr that says what is wrong and how to fix it, exit
code 2, no traceback, and no run directory left behind."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from helpers import imported_modules, own_lines, run_cli, tiny_args

from distcgan.data import write_dataset


def _fails(result, message, code=2):
    assert result.returncode == code, result.stderr
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert len(own_lines(result.stderr)) == 1, result.stderr
    return result


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data", "missing.h5"], "data file missing.h5 does not exist: prepare"),
        (["--batch-size", "0"], "batch_size must be a positive integer, got 0"),
        (["--steps", "0"], "steps must be a positive integer, got 0"),
        (["--classes", "10"], "class id 10 is out of range"),
        (["--preset", "nope"], "unknown preset 'nope'"),
        (["--resolution", "32"], "holds 16 px images but the config asks for 32 px"),
        (["--devices", "cuda:99"], "asks for cuda:99 but rank sees"),
        (["--lr-g", "-1"], "lr_g must be > 0"),
        (["--seed", "-1"], "seed must be >= 0, got -1"),
        (["--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
        (["--fuse", "x"], "fuse must be auto or a positive number of classes, got 'x'"),
        (["--fuse", "0"], "fuse must be auto or a positive number of classes, got '0'"),
        (["--fuse", "2", "--sync-bn"], "they do not combine; drop --sync-bn or use --fuse 1"),
        (["--cuda-graphs", "on", "--devices", "cpu"], "--cuda-graphs on needs G and D on one GPU"),
        (["--cuda-graphs", "yes"], "cuda_graphs must be auto, on or off, got 'yes' (set"),
        (["--inject-fault", "nan:1"], "--inject-fault 'nan:1': expected KIND:CLASS:STEP[:RANK]"),
        (["--inject-fault", "nan:1:2:0:5"], "'nan:1:2:0:5': expected KIND:CLASS:STEP[:RANK]"),
        (["--inject-fault", "boom:1:2"], "--inject-fault kind 'boom': use one of raise, kill"),
        (["--augment", "color,rotate"], "augment 'color,rotate': rotate is not a policy; use"),
        (["--augment-p", "0.5"], "--augment-p needs --augment POLICY"),
        (["--augment", "cutout", "--augment-p", "1.5"], "augment_p must be a probability in"),
        (["--augment", "cutout", "--augment-p", "x"], "augment_p must be a probability in"),
        (
            ["--augment", "cutout", "--augment-p", "auto", "--augment-target", "0"],
            "augment_target must be in (0, 1) and augment_kimg > 0, got 0.0",
        ),
    ],
)
def test_bad_flags(tmp_path, digits_file, args, message):
    base = ["train", "--run", str(tmp_path / "r"), "--data", str(digits_file), "--preset", "tiny"]
    _fails(run_cli(*base, *args), message)
    assert not (tmp_path / "r").exists()


def test_bad_flags_are_said_before_torch_loads(tmp_path, digits_file, monkeypatch):
    """A command line and its training configuration are checked before anything imports torch:
    the mistake is said at once, not after the seconds of loading torch (and torch._dynamo,
    which torch.optim pulls in) on every rank, which on a cluster's shared filesystem can be
    minutes."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    train = ["train", "--run", str(tmp_path / "r"), "--data", str(digits_file), "--preset", "tiny"]
    for args, message in [
        ([*train, "--steps", "ten"], "argument --steps: invalid int value: 'ten'"),
        ([*train, "--steps", "0"], "steps must be a positive integer, got 0"),
        ([*train, "--augment-p", "0.5"], "--augment-p needs --augment POLICY"),
        (["bench", "--resolution", "7"], "argument --resolution: invalid choice: 7"),
        (["sample", "--per-class", "2"], "the following arguments are required: --run"),
    ]:
        result = run_cli(*args)
        imported = imported_modules(result)
        _fails(result, message)
        assert "distcgan.cli" in imported and "torch" not in imported, (args, result.stderr)
    result = run_cli(*train, "--help")
    assert "torch" not in imported_modules(result)
    assert result.returncode == 0 and "--augment-p" in result.stdout, result.stderr
    # The same good command line does load torch, so the check above can tell.
    result = run_cli(*train, "--classes", "0", "--steps", "1", "--dry-run")
    assert "torch" in imported_modules(result)
    assert result.returncode == 0, result.stderr


def _raw(path, **datasets):
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            f[name] = value
    return path


@pytest.mark.launcher_neutral
def test_bad_data_files(tmp_path, digits_file):
    def train(data):
        return run_cli("train", "--run", str(tmp_path / "r"), "--data", str(data))

    cut = tmp_path / "cut.h5"
    cut.write_bytes(digits_file.read_bytes()[:5000])
    _fails(train(cut), "is not a readable HDF5 file")
    other = _raw(tmp_path / "other.h5", x=np.zeros((3, 4)), y=np.zeros(3))
    _fails(train(other), "has no 'images' dataset, so it is not in the class-partitioned layout")
    floats = _raw(
        tmp_path / "floats.h5",
        images=np.random.rand(4, 16, 16, 1),
        labels=np.zeros(4, np.int64),
        class_offsets=np.array([0, 4]),
    )
    _fails(train(floats), "images must be uint8 (N, H, W, C), got float64")
    px24 = tmp_path / "px24.h5"
    write_dataset(px24, np.zeros((4, 24, 24, 1), np.uint8), np.zeros(4, np.int64), ["a"], "t")
    said = "holds 24 px images, which the model does not support: write it again at one of 16, 32"
    _fails(train(px24), said)
    holes = tmp_path / "holes.h5"
    write_dataset(
        holes, np.zeros((4, 16, 16, 1), np.uint8), np.array([0, 0, 2, 2]), ["a", "b", "c"], "t"
    )
    _fails(train(holes), "class 1 (b) of")
    (tmp_path / "prepared").mkdir()
    _fails(train(tmp_path / "prepared"), "is a folder: give the .h5 file that python -m data_prep")
    assert not (tmp_path / "r").exists()


@pytest.mark.launcher_neutral
def test_bad_config_files(tmp_path, digits_file):
    def train(cfg):
        path = tmp_path / "cfg.json"
        path.write_text(json.dumps(cfg))
        return run_cli(
            "train", "--run", str(tmp_path / "r"), "--data", str(digits_file), "--config", str(path)
        )

    _fails(train({"lr": 0.1}), "cfg.json: unknown key 'lr'; valid keys are")
    _fails(train({"steps": "100"}), "cfg.json: steps must be of type int, got '100'")
    _fails(train({"classes": [1, "2"]}), "classes must be a list of integers")


@pytest.mark.launcher_neutral
def test_run_directory_of_an_incompatible_version(tmp_path, digits_file):
    run = tmp_path / "run"
    assert run_cli(*tiny_args(digits_file, run, "--classes", "0")).returncode == 0
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "format_version": 0}))
    _fails(
        run_cli("train", "--run", str(run), "--resume"),
        "config.json has format_version 0, but this distcgan reads 1: the run was written by "
        "an incompatible version",
    )
    (run / "config.json").write_text(json.dumps(config))
    # A real version 2 file: its checksummed payload names version 2 (a version digit flipped
    # over a version 1 payload is damage: tests/faults/test_checkpoint_version.py).
    import hashlib
    import io

    import torch

    from distcgan.run.checkpoint import read

    ckpt, buf = run / "class_000" / "checkpoint.pt", io.BytesIO()
    torch.save({**read(ckpt), "format_version": 2}, buf)
    digest = hashlib.sha256(buf.getvalue()).hexdigest().encode()
    ckpt.write_bytes(b"distcgan-checkpoint-v2\n" + digest + b"\n" + buf.getvalue())
    result = run_cli("train", "--run", str(run), "--resume", "--steps", "9", "--no-progress")
    assert result.returncode == 2
    assert "is a version 2 checkpoint; this distcgan reads version 1" in result.stderr
