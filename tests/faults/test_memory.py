"""Memory said before it is spent: a batch or fused group whose tensors would not fit the memory a
rank can use is refused in one line with the figure and the limit (exit 2, before any run
directory or tensor is made), on the CPU as on a GPU; a batch larger than a class's images is
refused too. (`--batch-size 100000` on 500-image classes grew past 10 GB per rank and ended by
the kernel's SIGKILL without a word.)"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from helpers import own_lines, run_cli, tiny_args

from distcgan.config import tiny
from distcgan.errors import UserError
from distcgan.train.memory import cgroup_room, check_batch, meminfo_available

HUGE = "10000000"  # ten million images a step: some 10,000 GB at 16 px, more than any node has
LIMIT = r"([0-9,]+\.[0-9]) GB"


def test_meminfo_and_cgroup_limits(tmp_path):
    assert meminfo_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2048 * 1024
    assert meminfo_available("MemTotal: 100 kB\n") is None
    # cgroup v1: the tightest level of the process's cgroup and its parents counts.
    job = tmp_path / "memory" / "slurm" / "job_7"
    job.mkdir(parents=True)
    for folder, limit, usage in ((job, 4 << 30, 1 << 30), (job.parent, 2 << 30, 1 << 29)):
        (folder / "memory.limit_in_bytes").write_text(f"{limit}\n")
        (folder / "memory.usage_in_bytes").write_text(f"{usage}\n")
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "memory" / "memory.usage_in_bytes").write_text("5\n")
    assert cgroup_room("4:memory:/slurm/job_7\n0::/\n", tmp_path) == (2 << 30) - (1 << 29)
    # cgroup v2: "max" is no limit.
    scope = tmp_path / "v2" / "user.slice"
    scope.mkdir(parents=True)
    (scope / "memory.max").write_text("max\n")
    (scope / "memory.current").write_text("100\n")
    assert cgroup_room("0::/user.slice\n", tmp_path / "v2") is None
    (scope / "memory.max").write_text("1000\n")
    assert cgroup_room("0::/user.slice\n", tmp_path / "v2") == 900


def test_a_batch_larger_than_the_class():
    cfg = tiny()
    check_batch(cfg, "class 0", 16, 1)  # a batch of all the images is fine
    with pytest.raises(UserError) as caught:
        check_batch(cfg, "class 3", 15, 1)
    assert str(caught.value) == (
        "--batch-size 16 draws 16 images a step but class 3 has 15: choose --batch-size 15 or less"
    )
    group = SimpleNamespace(**{**cfg.to_dict(), "global_batch_size": 64, "grad_accum": 1})
    group.micro_batch = lambda size: 64 // size
    with pytest.raises(UserError, match="--global-batch-size 64 draws 64 images a step but"):
        check_batch(group, "task all", 40, 2)


def _refused(result, pattern):
    assert result.returncode == 2, result.stderr
    lines = own_lines(result.stderr)  # Open MPI's mpiexec adds its own block
    assert len(lines) == 1, result.stderr
    found = re.fullmatch(pattern, lines[0])
    assert found, lines[0]
    return found


def test_a_batch_far_beyond_memory_on_the_cpu(tmp_path, digits_file):
    run = tmp_path / "run"
    result = run_cli(*tiny_args(digits_file, run, "--classes", "0", "--batch-size", HUGE))
    found = _refused(
        result,
        r"distcgan: error: class 0 at batch 10000000 needs about 10,444\.8 GB on the CPU, more "
        rf"than the {LIMIT} this rank can use there \((MemAvailable|left under this job's cgroup "
        rf"memory limit) {LIMIT}\): lower --batch-size to 178 or less \(class 0 has 178 images\)",
    )
    assert found.group(1) == found.group(3)  # one rank: the whole of it
    assert not run.exists()  # said before anything was made
    fused = run_cli(*tiny_args(digits_file, run, "--classes", "0", "1", "--fuse", "2",
                               "--batch-size", HUGE, "--devices", "cpu"))  # fmt: skip
    _refused(
        fused,
        r"distcgan: error: classes 0,1 fused \(--fuse\) at batch 10000000 need about "
        rf"20,889\.6 GB on the CPU, more than the {LIMIT} this rank can use there \(.*\): lower "
        "--fuse or --batch-size",
    )


@pytest.mark.mpi
def test_the_memory_of_a_node_is_shared_by_its_ranks(tmp_path, digits_file):
    run = tmp_path / "run"
    args = tiny_args(digits_file, run, "--classes", "0", "1", "--batch-size", HUGE)
    result = run_cli(*args, "--devices", "cpu", ranks=2)
    found = _refused(
        result,
        r"distcgan: error: class [01] at batch 10000000 needs about [0-9,.]+ GB on the CPU, "
        rf"more than the {LIMIT} this rank can use there \(.* {LIMIT}, shared by 2 ranks on this "
        r"node\): lower --batch-size to 1[78][0-9] or less \(class [01] has 1[78][0-9] images\)",
    )
    share, node = (float(found.group(i).replace(",", "")) for i in (1, 2))
    assert abs(share - node / 2) <= 0.1
    assert not run.exists()


def test_a_batch_larger_than_a_class_is_refused(tmp_path, digits_file):
    result = run_cli(*tiny_args(digits_file, tmp_path / "run", "--classes", "0", "--batch-size",
                                "200"))  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "distcgan: error: --batch-size 200 draws 200 images a step but class 0 has 178: choose "
        "--batch-size 178 or less"
    )
    # What it advises is accepted.
    ok = run_cli(*tiny_args(digits_file, tmp_path / "ok", "--classes", "0", "--batch-size", "178",
                            "--steps", "1"))  # fmt: skip
    assert ok.returncode == 0, ok.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
def test_a_batch_far_beyond_a_gpus_memory(tmp_path, digits_file):
    run = tmp_path / "run"
    args = ("--classes", "0", "--batch-size", HUGE, "--devices", "cuda:0")
    _refused(
        run_cli(*tiny_args(digits_file, run, *args)),
        r"distcgan: error: class 0 at batch 10000000 needs about 10,444\.8 GB on cuda:0, more "
        rf"than the {LIMIT} this rank can use there \(its free memory\): lower --batch-size to "
        r"178 or less \(class 0 has 178 images\)",
    )
    assert not run.exists()


def test_a_sample_count_far_beyond_memory(tmp_path, digits_file):
    run, export = tmp_path / "run", tmp_path / "export"
    assert run_cli(*tiny_args(digits_file, run, "--classes", "0", "--steps", "1")).returncode == 0
    assert run_cli("export", "--run", str(run), "--out", str(export)).returncode == 0
    out = tmp_path / "s.h5"
    sample = run_cli("sample", "--run", str(run), "--per-class", "10000000000", "--out", str(out))
    _refused(
        sample,
        r"distcgan: error: --per-class 10000000000 holds about 5,120\.0 GB of images in memory at "
        rf"once, more than the {LIMIT} this rank can use \(.*\): lower --per-class",
    )
    png = tmp_path / "g.png"
    generate = ("generate", "--model", str(export), "--class", "0", "--out", str(png))
    _refused(
        run_cli(*generate, "--n", "10000000000"),
        r"distcgan: error: --n 10000000000 holds about 5,120\.0 GB of images in memory at once, "
        rf"more than the {LIMIT} this rank can use \(.*\): lower --n",
    )
    assert not out.exists() and not png.exists()
