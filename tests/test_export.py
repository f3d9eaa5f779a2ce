"""`distcgan export` and `generate`: a trained run as one conditional generator G(z, y) that gives
`sample`'s images, loads in a Python without distcgan, and whose Inception Score a library we did
not write (torch-fidelity) computes as `evaluate` does; `distcgan.load_generator`; bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import save_tiny, tiny_args

import distcgan
from distcgan.cli import main
from distcgan.data import is_unlabelled, load_class, read_info

CLASSES = ("1", "4", "7")  # a subset with gaps: class ids are not rows


@pytest.fixture(scope="module")
def runs(tmp_path_factory, digits_file):
    """A finished run of each mode (tiny preset, classes 1, 4 and 7), and its export."""
    root = tmp_path_factory.mktemp("export")
    out = {}
    for mode in ("per-class", "cgan", "gan"):
        run, export = root / mode, root / f"{mode}-export"
        args = ("--mode", mode, "--classes", *CLASSES, "--devices", "cpu", "--threads", "1")
        assert main(tiny_args(digits_file, run, *args)) == 0
        assert main(["export", "--run", str(run), "--out", str(export)]) == 0
        out[mode] = (run, export)
    return out


def _sampled(run, tmp_path, per_class=40):
    path = tmp_path / "sampled.h5"
    args = ["sample", "--run", str(run), "--per-class", str(per_class), "--out", str(path)]
    assert main([*args, "--devices", "cpu", "--no-progress"]) == 0
    return path


def _noise(config, k, n, seed=0):
    """`sample --seed seed`'s noise of class k (eval/sampling/generators.noise)."""
    from distcgan.eval.sampling.generators import noise
    from distcgan.plan import class_seed

    return torch.cat(
        list(noise(n, config["z_dim"], class_seed(config["seed"] + seed, k, "sample")))
    )


def test_an_export_holds_weights_config_program_and_card(runs):
    _, export = runs["per-class"]
    assert sorted(p.name for p in export.iterdir()) == [
        "README.md", "config.json", "generator.pt2", "model.safetensors",
    ]  # fmt: skip
    config = json.loads((export / "config.json").read_text())
    assert (config["kind"], config["conditional"], config["class_ids"]) == (
        "per-class",
        True,
        [1, 4, 7],
    )
    assert config["class_names"] == ["1", "4", "7"] and len(config["data_class_names"]) == 10
    assert (config["resolution"], config["channels"], config["z_dim"]) == (16, 1, 100)
    from safetensors.torch import load_file

    weights = load_file(str(export / "model.safetensors"))
    assert weights["l1.weight"].shape == (3, 2048, 100)  # every class's G, stacked by class
    card = (export / "README.md").read_text()
    assert "| 4 | 4 |" in card and "torch.export.load" in card and "Not evaluated yet" in card
    assert "D dropout 0.25, D BatchNorm eps 0.8; weights" in card  # how D trained, said
    assert "over every launch, its classes one after another: " in card


@pytest.mark.parametrize("mode", ["per-class", "cgan", "gan"])
def test_the_exported_program_gives_the_images_sample_writes(mode, runs, tmp_path):
    # Same z and class, same uint8 images: exactly for cgan and gan (the same G), within one grey
    # level for per-class (the stacked model computes with per-sample weights: a batched matmul
    # and grouped convolutions round differently from one G's, and a pixel then and again
    # rounds to the next level).
    run, export = runs[mode]
    config = json.loads((export / "config.json").read_text())
    program = torch.export.load(str(export / "generator.pt2")).module()
    sampled = _sampled(run, tmp_path)
    for k in (1, 4, 7):
        z = _noise(config, k, 40)
        args = (z,) if mode == "gan" else (z, torch.full((40,), k))
        got = program(*args).permute(0, 2, 3, 1).numpy().astype(int)
        want = load_class(str(sampled), k).astype(int)
        assert got.dtype == np.int64 and got.shape == want.shape == (40, 16, 16, 1)
        worst = np.abs(got - want).max()
        assert worst <= (1 if mode == "per-class" else 0), (k, worst)
        assert (got != want).mean() < 0.01


def test_classes_mixed_in_one_batch_are_each_their_own_class(runs):
    _, export = runs["per-class"]
    program = torch.export.load(str(export / "generator.pt2")).module()
    z = torch.randn(7, 100, generator=torch.Generator().manual_seed(3))
    y = torch.tensor([7, 1, 4, 4, 1, 7, 1])
    mixed = program(z, y)
    for i in range(7):  # each sample alone, and a batch of any size (1 here, 7 above)
        assert torch.equal(mixed[i : i + 1], program(z[i : i + 1], y[i : i + 1]))
    assert not torch.equal(program(z[:1], torch.tensor([1])), program(z[:1], torch.tensor([4])))


def test_the_program_loads_and_runs_in_a_fresh_venv_with_torch_and_no_distcgan(runs, tmp_path):
    # A new virtual environment that sees this one's site-packages through a .pth line: torch
    # imports from there, and distcgan cannot (its editable install is a .pth file of that
    # folder, and Python reads .pth files only in its own site folders).
    _, export = runs["per-class"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "torch-only.pth").write_text(sysconfig.get_path("purelib") + "\n")
    code = (
        "import importlib.util, torch\n"
        "assert importlib.util.find_spec('distcgan') is None, 'distcgan is importable'\n"
        f"G = torch.export.load({str(export / 'generator.pt2')!r}).module()\n"
        "images = G(torch.randn(5, 100), torch.tensor([1, 4, 7, 7, 1]))\n"
        "print(images.dtype, tuple(images.shape))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    result = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "torch.uint8 (5, 1, 16, 16)"


def test_load_generator_is_the_exported_model_on_any_device(runs):
    _, export = runs["cgan"]
    G = distcgan.load_generator(export)
    assert G.config["kind"] == "cgan" and not G.training
    program = torch.export.load(str(export / "generator.pt2")).module()
    z, y = torch.randn(6, 100), torch.tensor([1, 4, 7, 1, 4, 7])
    assert torch.equal(G(z, y), program(z, y))
    floats = G.synthesize(z, y)
    assert floats.dtype == torch.float32 and -1 <= floats.min() and floats.max() <= 1


@pytest.mark.parametrize("mode", ["per-class", "gan"])
def test_generate_writes_what_sample_writes(mode, runs, tmp_path):
    run, export = runs[mode]
    sampled = _sampled(run, tmp_path, per_class=12)
    out = tmp_path / "generated.h5"
    args = ["generate", "--model", str(export), "--class", "4", "7", "--n", "12"]
    assert main([*args, "--out", str(out), "--devices", "cpu"]) == 0
    info = read_info(str(out))
    assert info.counts[4] == info.counts[7] == 12 and sum(info.counts) == 24
    assert is_unlabelled(str(out)) == (mode == "gan")
    for k in (4, 7):
        diff = np.abs(load_class(str(out), k).astype(int) - load_class(str(sampled), k))
        assert diff.max() <= 1
    grid = tmp_path / "grid.png"
    assert main([*args, "--out", str(grid), "--seed", "3"]) == 0
    from PIL import Image

    assert Image.open(grid).size[0] > Image.open(grid).size[1]  # 2 rows of 12


def test_export_refuses_to_clobber_and_replaces_an_export_when_asked(runs, tmp_path, capsys):
    run, _ = runs["gan"]
    out = tmp_path / "x"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", "--run", str(run), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"distcgan: error: --out {out} already exists: add --overwrite to replace it, or give "
        "another --out"
    ]
    assert main(["export", "--run", str(run), "--out", str(out), "--overwrite"]) == 2
    assert "is not a distcgan export" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"
    good = tmp_path / "good"
    assert main(["export", "--run", str(run), "--out", str(good)]) == 0
    assert main(["export", "--run", str(run), "--out", str(good), "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good", "x"]  # no staging left


def test_an_export_is_on_disk_before_it_takes_its_name(runs, tmp_path, monkeypatch):
    """Every file of an export and its folder are fsynced before the rename that makes them the
    export, and the rename after it: a node that dies just after "wrote OUT" leaves the export
    whole (or the one before it), never files of length 0 under OUT, as ext4's delayed
    allocation, Lustre or GPFS could, with the data still in memory."""
    from distcgan.export.writer import FILES

    run, _ = runs["gan"]
    events = []
    real_fsync, real_rename = os.fsync, Path.rename

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def rename(self, target):
        events.append(("rename", os.path.realpath(self), os.path.realpath(target)))
        return real_rename(self, target)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(Path, "rename", rename)
    out = Path(os.path.realpath(tmp_path)) / "x"
    assert main(["export", "--run", str(run), "--out", str(out)]) == 0
    ((at, (_, staged, _)),) = [(i, e) for i, e in enumerate(events) if e[-1] == str(out)]
    synced = {e[1] for e in events[:at] if e[0] == "fsync"}
    assert {f"{staged}/{f}" for f in FILES} | {staged} <= synced, events
    assert ("fsync", str(out.parent)) in events[at:], events


@pytest.mark.parametrize(
    "args, message",
    [
        (["--class", "3", "--n", "2"], "--class 3 is not in"),
        (["--class", "4", "--n", "0"], "--n must be a positive number of images per class, got 0"),
        (["--class", "4", "--n", "2", "--out", "x.jpg"], "write a .png (a grid) or a .h5"),
        (["--class", "4", "--n", "2", "--out", "no/such/x.png"], "folder no/such does not exist"),
        (["--class", "4", "--n", "2", "--out", "/"], "--out /: write a .png (a grid) or a .h5"),
        (["--class", "4", "1", "4", "--n", "2"], "--class 4 is given twice: name each class once"),
        (["--class", "4", "--n", "2", "--seed", "-3"], "argument --seed: a seed is a whole number"),
        (
            ["--class", "4", "--n", "2", "--devices", "gpu"],
            "devices 'gpu' is not understood: use auto, cpu or cuda:N",
        ),
        (
            ["--class", "4", "--n", "2", "--devices", "cuda:0,cpu"],
            "devices 'cuda:0,cpu' is not understood: use auto, cpu or cuda:N",
        ),
        (
            ["--class", "4", "--n", "2", "--devices", "cuda:7"],
            "devices 'cuda:7' asks for cuda:7 but rank sees",
        ),
    ],
)
def test_bad_generate_input_is_one_line(runs, tmp_path, capsys, args, message):
    _, export = runs["per-class"]
    argv = ["generate", "--model", str(export), "--out", str(tmp_path / "a.png"), *args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert err[0].startswith("distcgan: error: "), err  # one process: no "on rank 0"


def test_a_folder_as_generate_out_is_one_line_and_writes_nothing(runs, tmp_path, capsys):
    # A folder named like a grid passed the suffix check and failed only at the rename, after G ran.
    _, export = runs["per-class"]
    (tmp_path / "grid.png").mkdir()
    argv = ["generate", "--model", str(export), "--class", "4", "--n", "2"]
    assert main([*argv, "--out", str(tmp_path / "grid.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = f"--out {tmp_path}/grid.png is a folder: give a file name, such as {tmp_path}/grid.png/"
    assert len(err) == 1 and want in err[0], err
    assert list(tmp_path.iterdir()) == [tmp_path / "grid.png"]
    assert list((tmp_path / "grid.png").iterdir()) == []


def test_an_export_is_not_taken_for_a_run_nor_a_data_set_for_samples(
    runs, tmp_path, digits_file, capsys
):
    """An export passed where a run goes: sample and evaluate said "unknown key 'architecture'"
    and listed the 40 keys of a run, and `train --run EXPORT --overwrite` deleted the export to
    train in its place. generate --out DATA.h5 replaced a data set with its images."""
    _, export = runs["per-class"]
    before = {p.name: p.read_bytes() for p in export.iterdir()}
    said = f"{export} is a distcgan export, not a run directory"
    for argv in (
        ["sample", "--run", str(export), "--per-class", "2", "--out", str(tmp_path / "s.h5")],
        ["evaluate", "--run", str(export), "--network", "inception-v3"],
        ["report", "--run", str(export)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], (argv, err)
    train = tiny_args(digits_file, export, "--classes", "1", "--overwrite")
    assert main(train) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"distcgan: error: {said}: refusing to train in it; choose another --run"]
    assert {p.name: p.read_bytes() for p in export.iterdir()} == before
    data = tmp_path / "data.h5"
    data.write_bytes(digits_file.read_bytes())
    argv = ["generate", "--model", str(export), "--class", "4", "--n", "2", "--out", str(data)]
    assert main(argv) == 2  # an existing file: refused without --overwrite
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {data} already exists: add --overwrite" in err[0], err
    assert main([*argv[:-2], "--overwrite", *argv[-2:]]) == 2  # and a data set even with it
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "exists and is a data set (sklearn-digits)" in err[0], err
    assert data.read_bytes() == digits_file.read_bytes()
    argv[argv.index("--model") + 1] = str(data)
    argv[-1] = str(tmp_path / "g.png")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{data} is a file, not a distcgan export (a folder)" in err[0], err


def test_not_an_export_and_an_unfinished_run_are_one_line(tmp_path, digits_file, capsys):
    assert main(["generate", "--model", str(tmp_path), "--class", "1", "--n", "1",
                 "--out", str(tmp_path / "a.png")]) == 2  # fmt: skip
    assert "is not a distcgan export (no config.json)" in capsys.readouterr().err
    run = tmp_path / "run"  # a run that crashed after its checkpoint at step 3 of 6
    args = ("--classes", "2", "--devices", "cpu", "--inject-fault", "raise:2:3")
    assert main(tiny_args(digits_file, run, *args)) == 1
    capsys.readouterr()
    assert main(["export", "--run", str(run), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "class 2 stopped at step 3 of 6: finish training" in err[0], err
    assert not (tmp_path / "e").exists()


def test_torch_fidelity_computes_the_inception_score_evaluate_computes(runs, tmp_path):
    # torch-fidelity draws the noise and calls the exported G through its generator interface;
    # the images it saw are kept and scored by `distcgan evaluate` with the same network. One
    # split, so that the scores do not depend on how each shuffles its splits. torch-fidelity
    # 0.4 draws conditional labels with np.int (gone since numpy 1.24), so the wrapper is
    # unconditional to it and picks the classes itself, in turn.
    import torch_fidelity
    from torch_fidelity.feature_extractor_base import FeatureExtractorBase
    from torch_fidelity.generative_model_modulewrapper import GenerativeModelModuleWrapper
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

    _, export = runs["per-class"]
    scorer = save_tiny(tmp_path / "scorer.pt")
    net = torch.jit.load(str(scorer))
    G = distcgan.load_generator(export)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    class Cycling(torch.nn.Module):
        def forward(self, z):
            y = torch.tensor([1, 4, 7])[torch.arange(len(seen) * 50, len(seen) * 50 + len(z)) % 3]
            images = G(z, y)
            seen.append((images, y))
            return images

    class Scorer(FeatureExtractorBase):
        def __init__(self, name, features_list, **kwargs):
            super().__init__(name, features_list)

        @staticmethod
        def get_provided_features_list():
            return ("logits_unbiased",)

        @staticmethod
        def get_default_feature_layer_for_metric(metric):
            return "logits_unbiased"

        @staticmethod
        def can_be_compiled():
            return False

        def forward(self, x):
            return (net(x.float() / 127.5 - 1.0).double(),)

    FEATURE_EXTRACTORS_REGISTRY.pop("distcgan-scorer", None)
    torch_fidelity.register_feature_extractor("distcgan-scorer", Scorer)
    wrapped = GenerativeModelModuleWrapper(Cycling(), 100, "normal", 0)
    theirs = torch_fidelity.calculate_metrics(
        input1=wrapped, input1_model_num_samples=300, batch_size=50, isc=True, isc_splits=1,
        feature_extractor="distcgan-scorer", cuda=False, verbose=False, cache=False,
    )["inception_score_mean"]  # fmt: skip
    images, labels = torch.cat([i for i, _ in seen]), torch.cat([y for _, y in seen])
    from distcgan.data import DatasetWriter

    samples = tmp_path / "seen.h5"
    with DatasetWriter(samples, [str(k) for k in range(10)], 16, 1, "test") as w:
        for k in range(10):
            w.add_class(k, images[labels == k].permute(0, 2, 3, 1).numpy())
    json_out = tmp_path / "ours.json"
    argv = ["evaluate", "--samples", str(samples), "--network", str(scorer), "--splits", "1"]
    assert main([*argv, "--json", str(json_out), "--devices", "cpu", "--no-progress"]) == 0
    ours = json.loads(json_out.read_text())["is_mean"]
    print(f"torch-fidelity IS {theirs:.9f}, distcgan evaluate IS {ours:.9f}")
    assert len(images) == 300 and theirs == pytest.approx(ours, rel=1e-3)


def test_the_files_sample_generate_and_evaluate_write_say_what_made_them(runs, tmp_path, capsys):
    # Outside a run directory nothing said how a sample file or a score came to be: each now
    # carries its command, resolved options, command line, time, versions and commit.
    import h5py

    run, export = runs["per-class"]
    samples, made = tmp_path / "s.h5", tmp_path / "g.h5"
    assert main(["sample", "--run", str(run), "--per-class", "3", "--out", str(samples),
                 "--seed", "5", "--no-progress"]) == 0  # fmt: skip
    assert main(["generate", "--model", str(export), "--class", "4", "--n", "2",
                 "--out", str(made)]) == 0  # fmt: skip
    net, scores = save_tiny(tmp_path / "net.pt"), tmp_path / "e.json"
    assert main(["evaluate", "--samples", str(samples), "--network", str(net), "--splits", "1",
                 "--json", str(scores), "--devices", "cpu", "--no-progress"]) == 0  # fmt: skip
    records = []
    for path in (samples, made):
        with h5py.File(path) as f:
            records.append(json.loads(f.attrs["provenance"]))
    records.append(json.loads(scores.read_text())["provenance"])
    for record, command in zip(records, ("sample", "generate", "evaluate")):
        assert record["command"] == command
        for key in ("argv", "time_utc", "distcgan", "git_commit", "python", "torch", "host"):
            assert key in record, (command, key)
    assert records[0]["options"]["run"] == str(run) and records[0]["options"]["seed"] == 5
    assert records[1]["options"]["classes"] == [4] and records[1]["options"]["n"] == 2
    assert records[2]["options"]["samples"] == str(samples)
    assert records[2]["options"]["network"] == str(net)
