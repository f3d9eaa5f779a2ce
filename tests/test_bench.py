"""`distcgan bench` runs both steps in worker processes and reports the figures it promises
(the figures themselves are measurements, reported in the closing notes, not asserted here)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO, imported_modules, run_cli

from distcgan.bench import Ours, Reference, sig
from distcgan.bench_flags import MOVED
from distcgan.bench_worker import matmul_gflops, matmul_peak, step_gflop


def test_bench_prints_its_figures_and_ends_with_one_json_line():
    result = run_cli(
        "bench",
        "--resolution",
        "16",
        "--batch-size",
        "8",
        "--windows",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--scaling",
        "2",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for key in (
        "ours_img_s",
        "reference_img_s",
        "ratio",
        "gflop_per_step",
        "matmul_gflops",
        "peak_fraction",
        "data_fraction",
        "scaling_retention",
    ):
        assert out[key] > 0, key
    assert len(out["ours_windows"]) == len(out["reference_windows"]) == 2
    assert out["matmul_dtype"] == "float32" and "measured float32 matmul" in result.stdout
    # img/s keep 4 significant digits and the ratio 3, however slow the machine: at 3 img/s
    # (a loaded CPU) figures rounded to 0.1 put the ratio 2% off its own quotient.
    assert out["ratio"] == pytest.approx(out["ours_img_s"] / out["reference_img_s"], rel=0.006)


def test_step_flops_match_the_architecture():
    class Args:
        resolution, batch_size, device_g, device_d, amp, channels = 16, 4, "cpu", "cpu", "off", 1

    ours, ref = Ours(Args), Reference(Args)
    # G's convolutions dominate: 2 x (128*128*9*8*8 + 128*64*9*16*16 + 64*9*16*16) MACs per
    # image forward; with backward (x3) over the batch.
    g_forward = 2 * (128 * 128 * 9 * 64 + 128 * 64 * 9 * 256 + 64 * 9 * 256) / 1e9
    assert 3 * 4 * g_forward < step_gflop(ref) < 3 * 4 * g_forward * 1.3
    assert step_gflop(ours) > step_gflop(ref)  # ours also re-runs D on the real half
    assert matmul_gflops("cpu", seconds=0.1) > 0


def test_the_reference_step_trains_in_the_channels_ours_does():
    # --channels 3 compared our RGB step with a grayscale reference (it hard-coded 1 channel).
    class Args:
        resolution, batch_size, device_g, device_d, amp, channels = 16, 4, "cpu", "cpu", "off", 3

    ours, ref = Ours(Args), Reference(Args)
    assert ours.member.feed.real.shape[1] == ref.real_all.shape[1] == 3
    assert ref.G(torch.randn(2, 100)).shape == (2, 3, 16, 16)
    assert next(ref.D.parameters()).shape[1] == 3  # D's first convolution takes RGB
    ref.step()


def test_fractions_keep_three_significant_digits_however_small():
    # On a fast CPU the data's share of a step is about 4e-5: rounded to 4 decimals it read 0.0
    # and the bench test above failed there.
    assert sig(4.2e-5) == 4.2e-5 and sig(0.123456) == 0.123 and sig(1234.5, 4) == 1234.0
    assert sig(0.0) == 0.0


def test_bench_fuse_compares_k_classes_fused_with_the_same_k_one_at_a_time():
    args = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 1 --fuse 3".split()
    result = run_cli("bench", *args)
    assert result.returncode == 0, result.stderr
    assert "3 classes fused vs one at a time, 16 px" in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["fuse"] == 3
    for key in ("fused_img_s", "one_at_a_time_img_s", "fuse_ratio", "peak_fraction"):
        assert out[key] > 0, key
    assert 0 < out["data_fraction"] < 1  # the three classes' draws, a share of the fused step
    assert "% of a fused step" in result.stdout
    assert len(out["fused_windows"]) == len(out["one_at_a_time_windows"]) == 2
    assert out["fuse_ratio"] == pytest.approx(
        out["fused_img_s"] / out["one_at_a_time_img_s"], rel=0.006
    )
    # the fused step is three classes' steps: three times one class's FLOPs
    one = step_gflop(Ours(_Args))
    assert out["gflop_per_step"] == pytest.approx(3 * one, rel=1e-3)
    assert out["gpu_fused"] == out["gpu_one_at_a_time"] == {}  # NVML figures are for GPUs


class _Args:
    resolution, batch_size, device_g, device_d, amp, channels = 16, 16, "cpu", "cpu", "off", 1


@pytest.mark.parametrize(
    "args, message",
    [
        ("--fuse 2 --cuda-graphs", "--fuse 2 with G on cpu and D on cpu"),
        ("--cuda-graphs --device-g cuda:0", "--fuse 1 with G on cuda:0"),
        ("--fuse 0", "--fuse must be a number of classes >= 1, got 0"),
        ("--augment blur", "--augment blur: blur is not a policy; use a comma list of color"),
        ("--augment color --fuse 2 --schedule async", "--schedule async times the step sync"),
        ("--schedule async --augment color", "--schedule async times the step sync against"),
        ("--batch-size-d 8", "--batch-size-d goes with --schedule async"),
        ("--schedule async --batch-size-d 99", "--batch-size-d must be in [0, --batch-size 64]"),
        ("--batch-size 0", "--batch-size must be a whole number >= 1, got 0"),
        ("--windows 0", "--windows must be a whole number >= 1, got 0"),
        ("--steps 0", "--steps must be a whole number >= 1, got 0"),
        ("--warmup -1", "--warmup must be a whole number >= 0, got -1"),
        ("--threads -2", "--threads must be a whole number >= 0, got -2"),
        ("--scaling -1", "--scaling must be a whole number >= 0, got -1"),
        ("--channels 2", "--channels must be 1 (grey) or 3 (RGB), got 2"),
        ("--device-g gpu", "--device-g: devices 'gpu' is not understood: use auto, cpu or cuda:N"),
        ("--device-d cuda:0,cpu", "--device-d: devices 'cuda:0,cpu' is not understood"),
        ("--device-d cuda:99", "--device-d: devices 'cuda:99' asks for cuda:99 but rank sees"),
        ("--device-g cuda:00", "--device-g: devices 'cuda:00' is not understood"),
    ],
)
def test_bench_refuses_what_it_cannot_measure_in_one_line(args, message, monkeypatch):
    """Said before torch loads, but for cuda:N past the GPUs seen, which asks torch."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    result = run_cli("bench", *args.split())
    imported = imported_modules(result)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert ("torch" in imported) is ("but rank sees" in message), imported


@pytest.mark.parametrize(
    "args, hint",
    [
        ("--channels-last", "python benchmarks/fused_alternatives.py --channels-last"),
        (
            "--fuse 2 --streams --device-g cuda:0 --cuda-graphs",
            "python benchmarks/fused_alternatives.py --device-g cuda:0 --fuse 2 --cuda-graphs "
            "--streams",
        ),
        (
            "--resolution 16 --fuse 3 --compile default --bmm-linear --windows 3",
            "python benchmarks/fused_alternatives.py --resolution 16 --windows 3 --fuse 3 "
            "--compile default --bmm-linear",
        ),
        ("--conv-linear --device-d cpu", "python benchmarks/fused_alternatives.py --conv-linear"),
    ],
)
def test_a_flag_that_moved_names_the_command_that_times_it_now(args, hint, monkeypatch):
    """The alternatives that training does not run moved to benchmarks/fused_alternatives.py:
    bench says so in one line (not argparse's 'unrecognized arguments'), with the command that
    times what was asked, the same flags given, before torch loads."""
    monkeypatch.setenv("PYTHONPROFILEIMPORTTIME", "1")
    result = run_cli("bench", *args.split())
    imported = imported_modules(result)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    moved = args.split()[[w in MOVED for w in args.split()].index(True)]
    assert lines[0].startswith(f"distcgan: error: {moved} times an alternative to the fused")
    assert f"run `{hint}` from the repository root" in lines[0]
    assert "torch" not in imported


def test_the_command_a_moved_flag_names_takes_its_flags():
    """The hinted command runs: here it reaches the script's own check of --streams (a CPU has
    no CUDA graph), which it could not with a flag it did not know."""
    said = run_cli("bench", "--fuse", "2", "--streams").stderr
    hint = said.split("`")[1].split()
    assert hint[:2] == ["python", "benchmarks/fused_alternatives.py"]
    cmd = [sys.executable, *hint[1:]]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.splitlines() == [
        "fused_alternatives.py: error: --streams times K pairs in one CUDA graph on one GPU, "
        "and this asks for --fuse 2 with G on cpu and D on cpu: give --fuse K (K > 1) and "
        "--device-g cuda:N without another --device-d or --schedule async"
    ]


def test_the_module_entry_refuses_in_one_line_too():
    """`python -m distcgan.bench` (the workers' entry, without --worker) says what bench cannot
    measure as `distcgan bench` does: one line, exit 2."""
    for args, message in (
        ("--fuse 0", "--fuse must be a number of classes >= 1, got 0"),
        ("--device-d cuda:99", "--device-d: devices 'cuda:99' asks for cuda:99 but rank sees"),
    ):
        cmd = [sys.executable, "-m", "distcgan.bench", *args.split()]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"python -m distcgan.bench: error: {message}"), lines


def test_bench_device_auto_is_the_gpu_where_one_is_seen_else_the_cpu():
    out = _bench("--device-g auto", "ratio")
    want = "cuda:0" if torch.cuda.is_available() else "cpu"
    assert (out["device_g"], out["device_d"]) == (want, want)


def _bench(args: str, says: str) -> dict:
    """`distcgan bench ARGS` (small and short: 16 px, batch 8, two windows of two steps): it
    exits 0 and says `says`; its JSON line."""
    fixed = "--resolution 16 --batch-size 8 --windows 2 --steps 2 --warmup 1"
    result = run_cli("bench", *fixed.split(), *args.split())
    assert result.returncode == 0, result.stderr
    assert says in result.stdout, result.stdout
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_under_amp_bf16_the_peak_is_measured_in_bf16_on_a_cpu_too():
    # On a CPU with AMX, bf16 matrix products run about 7x faster than float32 ones: a float32
    # peak put a bf16 step at 152% of it on such a Xeon. The dtype is the one the worker measured
    # in, as it reports it.
    out = _bench("--amp bf16", "measured bf16 matmul")
    assert out["amp"] == "bf16" and out["matmul_dtype"] == "bf16" and out["peak_fraction"] > 0


def test_the_peak_is_measured_in_the_precision_it_is_named_by(monkeypatch):
    asked = []
    monkeypatch.setattr(
        "distcgan.bench_worker.matmul_gflops", lambda device, dtype: asked.append(dtype) or 1.0
    )
    assert matmul_peak("cpu", "bf16") == ("bf16", 1.0)
    assert matmul_peak("cpu", "off") == ("float32", 1.0)
    assert asked == [torch.bfloat16, torch.float32]
    assert matmul_gflops("cpu", seconds=0.05, dtype=torch.bfloat16) > 0


def test_bench_times_the_step_with_and_without_augmentation_in_the_same_windows():
    out = _bench("--augment cutout", "--augment cutout makes our step")
    assert out["augment"] == "cutout" and len(out["augmented_windows"]) == 2
    assert out["augment_cost"] == pytest.approx(
        out["ours_img_s"] / out["augmented_img_s"], rel=0.006
    )


def test_bench_fuse_times_the_fused_step_with_and_without_augmentation_in_the_same_windows():
    out = _bench("--fuse 2 --augment color,cutout", "--augment color,cutout makes the fused step")
    assert out["augment"] == "color,cutout"
    assert len(out["augmented_windows"]) == len(out["fused_windows"]) == 2
    assert out["augment_cost"] == pytest.approx(
        out["fused_img_s"] / out["augmented_img_s"], rel=0.006
    )


def test_the_fused_augmented_variant_augments_every_class_and_the_plain_ones_none():
    """bench's fused step with --augment draws each class's augmentation (the classes' configs
    say the policy), while the fused step it is timed against, and the classes one at a time,
    keep the plain step whatever --augment says."""
    from distcgan.bench import Fused, FusedAugmented, OneAtATime

    args = argparse.Namespace(
        **{k: getattr(_Args, k) for k in ("resolution", "batch_size", "device_g", "device_d")},
        amp="off", channels=1, fuse=2, cuda_graphs=False, augment="color,cutout",
        batch_size_d=0,
    )  # fmt: skip
    aug = FusedAugmented(args)
    assert aug.cfg.augment == "color,cutout"
    assert [c.cfg.augment for c in aug.classes] == ["color,cutout"] * 2
    for plain in (Fused(args), OneAtATime(args)):
        assert [c.cfg.augment for c in plain.classes] == ["none"] * 2
    # a fused augmented step draws from every class's augmentation stream
    before = [c.member.pair.augment.get_state() for c in aug.classes]
    aug.step()
    after = [c.member.pair.augment.get_state() for c in aug.classes]
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


def test_bench_times_sync_against_async_and_the_copy_of_d_in_the_same_windows():
    out = _bench("--schedule async --batch-size-d 4", "our sync step (D sees 4 a step); D's copy")
    assert len(out["async_windows"]) == 2 and out["batch_size_d"] == 4
    assert out["async_speedup"] == pytest.approx(out["async_img_s"] / out["ours_img_s"], rel=0.006)
    assert out["copy_bytes"] > 300_000 and out["copy_s_per_step"] > 0


def test_bench_fuse_times_the_fused_pair_sync_against_async_in_the_same_windows():
    args = "--resolution 16 --batch-size 16 --windows 2 --steps 2 --warmup 1 --fuse 2"
    result = run_cli("bench", *args.split(), "--schedule", "async", "--batch-size-d", "8")
    assert result.returncode == 0, result.stderr
    assert "x the fused sync step (D sees 8 a class a step)" in result.stdout
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(out["fused_async_windows"]) == len(out["fused_windows"]) == 2
    assert out["fused_async_speedup"] == pytest.approx(
        out["fused_async_img_s"] / out["fused_img_s"], rel=0.006
    )
    assert out["batch_size_d"] == 8 and out["gpu_fused_async"] == {}


def test_gpu_profile_sums_the_fused_step_by_kind_on_a_cpu():
    cmd = [sys.executable, str(REPO / "benchmarks" / "gpu_profile.py"), "--resolution", "16"]
    cmd += ["--batch-size", "8", "--fuse", "2", "--steps", "2", "--warmup", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["operators_ms"] > 0
    assert out["ms_by_kind"]["convolution"] > 0  # the grouped convolutions, by name
    assert sum(out["ms_by_kind"].values()) == pytest.approx(out["operators_ms"], rel=1e-3)
    bad = subprocess.run([*cmd[:2], "--fuse", "1"], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "gpu_profile.py: --fuse 1 has no fused step to profile: give --fuse K with K > 1"
    ]
