"""One-process training runs of the tiny preset: the run directory, resume, safety, bad input."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import run_cli, tiny_args

from distcgan.cli import main
from distcgan.run.checkpoint import read
from distcgan.train.step import batch_indices


def test_batch_stream_visits_every_image_once_per_epoch():
    n, b = 10, 4
    stream = torch.cat([batch_indices(n, b, s, seed=7) for s in range(5)])  # 20 = 2 epochs
    assert sorted(stream[:10].tolist()) == list(range(10))
    assert sorted(stream[10:].tolist()) == list(range(10))
    assert not torch.equal(stream[:10], stream[10:])  # a new order each epoch
    assert torch.equal(batch_indices(n, b, 3, seed=7), batch_indices(n, b, 3, seed=7))
    assert batch_indices(3, 8, 0, seed=1).tolist() != []  # fewer images than the batch
    assert len(batch_indices(3, 8, 5, seed=1)) == 8


def test_cpu_model_reads_the_first_model_name_and_falls_back_to_the_platform(tmp_path):
    import platform

    from distcgan.env import cpu_model

    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\n"
        "processor\t: 1\nmodel name\t: AMD EPYC 7B13 (second)\n"
    )
    assert cpu_model(info) == "AMD EPYC 7B13"
    assert cpu_model(tmp_path / "none") == platform.processor()  # not Linux


def test_run_directory_holds_the_contract(tmp_path, digits_file):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "2", "5")) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["classes"] == [2, 5] and config["steps"] == 6 and config["format_version"] == 1
    env = json.loads((run / "env.json").read_text())
    for key in ("python", "torch", "mpi_library", "mpi4py", "git_commit", "hosts", "launcher_job"):
        assert key in env
    assert "MPICH" in env["mpi_library"] or "Open MPI" in env["mpi_library"]
    summary = json.loads((run / "summary.json").read_text())
    assert [c["class_id"] for c in summary["classes"]] == [2, 5]
    for c in summary["classes"]:
        assert c["rank"] == 0 and c["steps"] == 6 and c["train_s"] > 0 and c["imgs_per_s"] > 0
        cdir = run / f"class_{c['class_id']:03d}"
        assert read(cdir / "checkpoint.pt")["step"] == 6
        lines = [json.loads(x) for x in (cdir / "metrics.jsonl").read_text().splitlines()]
        assert [m["step"] for m in lines] == [2, 3, 4, 6]
        assert set(lines[0]) == {
            "step",
            "loss_d",
            "loss_g",
            "d_real",
            "d_fake",
            "logit_gap",
            "d_acc",
            "d_real_sign",
            "s_per_step",
            "rank",
            "time_unix",
        }
        assert (cdir / "samples_step0000006.png").is_file()
    assert not (run / "class_000").exists()


def _weights(run, class_id):
    return read(run / f"class_{class_id:03d}" / "checkpoint.pt")


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, digits_file):
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    # Bit-identity is promised on the CPU (GPU kernels such as upsampling's backward use atomics).
    common = ("--classes", "4", "--checkpoint-every", "4", "--devices", "cpu")
    assert main(tiny_args(digits_file, straight, *common, "--steps", "8")) == 0
    assert main(tiny_args(digits_file, halves, *common, "--steps", "4")) == 0
    assert main(["train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress"]) == 0
    a, b = _weights(straight, 4), _weights(halves, 4)
    assert a["step"] == b["step"] == 8
    for net in ("G", "D"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)
    assert torch.equal(a["rng"]["cpu"], b["rng"]["cpu"])
    steps = [
        json.loads(x)["step"]
        for x in (halves / "class_004" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [2, 4, 6, 8]


@pytest.mark.parametrize("mode", ["gan", "cgan"])
def test_the_one_pair_trains_the_same_whatever_the_order_of_the_classes(
    tmp_path, digits_file, mode
):
    # --classes 3 1 6 drew other images and (cgan) other labels than --classes 1 3 6.
    common = ("--mode", mode, "--steps", "3", "--devices", "cpu")
    runs = {}
    for order in (("1", "3", "6"), ("6", "1", "3")):
        run = tmp_path / "".join(order)
        assert main(tiny_args(digits_file, run, "--classes", *order, *common)) == 0
        runs[order] = read(run / "all" / "checkpoint.pt")
    a, b = runs.values()
    for net in ("G", "D"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)


def test_bf16_autocast_on_the_cpu_trains_checkpoints_and_resumes_exactly(tmp_path, digits_file):
    # CPUs run bf16 autocast too (fast where they have AMX), so --amp bf16 is tested everywhere,
    # not only on GPUs: a run stopped at step 4 and resumed equals one that was never stopped.
    straight, halves, fp32 = tmp_path / "straight", tmp_path / "halves", tmp_path / "fp32"
    common = ("--classes", "4", "--checkpoint-every", "4", "--devices", "cpu", "--threads", "1")
    assert main(tiny_args(digits_file, straight, *common, "--amp", "bf16", "--steps", "8")) == 0
    assert main(tiny_args(digits_file, halves, *common, "--amp", "bf16", "--steps", "4")) == 0
    assert main(["train", "--run", str(halves), "--resume", "--steps", "8", "--no-progress"]) == 0
    assert main(tiny_args(digits_file, fp32, *common, "--steps", "8")) == 0
    a, b, c = _weights(straight, 4), _weights(halves, 4), _weights(fp32, 4)
    assert a["step"] == b["step"] == 8
    assert json.loads((halves / "config.json").read_text())["amp"] == "bf16"
    for net in ("G", "D"):
        for key in a[net]:
            assert torch.equal(a[net][key], b[net][key]), (net, key)
            assert a[net][key].dtype == c[net][key].dtype  # autocast keeps float32 weights
        assert all(torch.isfinite(a[net][k]).all() for k in a[net] if a[net][k].is_floating_point())
    # bf16 arithmetic took place: the same run in float32 ends elsewhere
    assert not torch.equal(a["G"]["l1.weight"], c["G"]["l1.weight"])


def test_every_launch_keeps_its_own_config_and_environment(tmp_path, digits_file):
    # config.json and env.json are the last launch's; a resume that changes a resumable field
    # (--steps, --log-every) leaves the first launch's values in launches/001.json.
    run = tmp_path / "run"
    args = ("--classes", "1", "--devices", "cpu", "--threads", "1")
    assert run_cli(*tiny_args(digits_file, run, *args)).returncode == 0
    again = ("train", "--run", str(run), "--resume", "--steps", "8", "--log-every", "4")
    assert run_cli(*again, "--no-progress").returncode == 0
    first, second = (json.loads((run / "launches" / f"{n:03d}.json").read_text()) for n in (1, 2))
    assert [first["launch"], second["launch"]] == [1, 2]
    assert (first["config"]["steps"], first["config"]["log_every"]) == (6, 2)
    assert (second["config"]["steps"], second["config"]["log_every"]) == (8, 4)
    assert "--resume" not in first["env"]["argv"] and "--resume" in second["env"]["argv"]
    for name in ("config", "env"):  # the last launch's, as config.json and env.json hold it
        last = json.loads((run / f"{name}.json").read_text())
        assert second[name] == {k: v for k, v in last.items() if k != "format_version"}


def test_resume_skips_finished_classes(tmp_path, digits_file, capsys):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0", "1")) == 0
    mtime = (run / "class_000" / "checkpoint.pt").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--run", str(run), "--resume", "--no-progress"]) == 0
    assert "class_start" not in capsys.readouterr().out
    assert (run / "class_000" / "checkpoint.pt").stat().st_mtime_ns == mtime


def test_existing_run_directory_is_never_clobbered(tmp_path, digits_file, capsys):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0")) == 0
    capsys.readouterr()
    assert main(tiny_args(digits_file, run, "--classes", "0")) == 2
    assert "run directory" in capsys.readouterr().err
    assert main(tiny_args(digits_file, run, "--classes", "1", "--overwrite")) == 0
    assert not (run / "class_000").exists() and (run / "class_001").exists()
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    assert main(tiny_args(digits_file, other, "--overwrite")) == 2
    assert "is not a distcgan run directory" in capsys.readouterr().err
    assert (other / "thesis.tex").exists()


def test_resume_refuses_to_change_the_model(tmp_path, digits_file, capsys):
    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "0")) == 0
    capsys.readouterr()
    assert main(["train", "--run", str(run), "--resume", "--lr-g", "0.01"]) == 2
    assert "--resume cannot change lr_g" in capsys.readouterr().err


def test_a_bad_d_bn_eps_is_one_line_and_exit_2(tmp_path, digits_file, capsys):
    assert main(tiny_args(digits_file, tmp_path / "run", "--d-bn-eps", "-1")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "d_bn_eps must be > 0, got -1.0" in err
    assert not (tmp_path / "run").exists()


def test_sample_file_and_grid(tmp_path, digits_file):
    from distcgan.data import load_class, read_info

    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "1", "3")) == 0
    out = tmp_path / "s.h5"
    assert main(["sample", "--run", str(run), "--per-class", "12", "--out", str(out)]) == 0
    info = read_info(str(out))
    assert info.counts == (0, 12, 0, 12, 0, 0, 0, 0, 0, 0)
    assert info.class_names == tuple(str(i) for i in range(10))
    assert load_class(str(out), 3).shape == (12, 16, 16, 1)
    from PIL import Image

    grid = Image.open(out.with_suffix(".png"))
    assert grid.size[1] < grid.size[0]  # 2 rows of 10
    again = tmp_path / "again.h5"
    assert main(["sample", "--run", str(run), "--per-class", "12", "--out", str(again)]) == 0
    assert (load_class(str(again), 1) == load_class(str(out), 1)).all()
