"""One training job end to end (issue 80), from generated images to an export, each command
timed, then `distcgan bench` at the job's shape: the job's images/s against the step's, and the
shares of its time in start-up, checkpoints, grids and scoring. No download: the images are made
here, and the scores use a classifier trained here (inception's weights would need one).

    python benchmarks/gpu_job.py OUT --device cuda:0                  # 64 classes, 1,000 steps
    python benchmarks/gpu_job.py OUT --device cpu --classes 3 --per-class 40 --steps 4 \\
        --batch-size 16 --amp off --fuse 3 --sample-per-class 8 --eval-n 30   # a CPU smoke

What runs, each a `python -m distcgan` (or data_prep) command in OUT/ (which must not exist):
1. K classes of 32 px RGB images, each class its own colour and stripes (frequency,
   orientation) under random phase and noise, written as downsampled ImageNet's npz batch
   (`train_data_batch_1.npz`), then `data_prep imagenet-npz` -> data.h5;
2. `classifier train data.h5`: the scoring network of `evaluate`;
3. `train --preset imagenet32 --fuse auto --amp bf16`: on a GPU fused and graphed (the
   default), checkpoints every 1,000 steps and at the end, the final grid, no scores while
   training (--score-every 0): the preset's defaults. summary.json's rows say the seconds
   and counts of the checkpoint and grid writes (and of scores while training, if any);
4. `sample`, 5. `evaluate --network classifier.pt` (the scoring), 6. `export`;
7. `bench` at the job's shape: F the largest group train fused (its `fused` events), graphed
   on a GPU, or one pair where nothing was fused.
Prints a table and one JSON line (also OUT/job.json): each command's seconds, train's split
(start-up: the process's seconds before its first class; loading; training; checkpoints; grids;
the rest), images/s of the job (images over train's wall time), of its training (summary.json's
`job.imgs_per_s`) and of bench's step, and their ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
R = 32  # px: imagenet32's shape


def images(classes: int, per_class: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows as downsampled ImageNet stores them (uint8, (n, 3*R*R): the R*R reds, greens, then
    blues) and 1-based labels: class k's images are stripes of its own frequency, angle and
    colour, at a random phase, with noise, so that a GAN has something to learn per class."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:R, 0:R] / R
    data, labels = [], []
    for k in range(classes):
        angle, freq = math.pi * k / classes, 1 + k % 4
        colour = 0.5 + 0.5 * np.cos(2 * math.pi * (k / classes + np.array([0, 1 / 3, 2 / 3])))
        phase = rng.uniform(0, 2 * math.pi, (per_class, 1, 1))
        wave = np.sin(2 * math.pi * freq * (xx * math.cos(angle) + yy * math.sin(angle)) + phase)
        img = 30 + 200 * colour[None, :, None, None] * (0.5 + 0.45 * wave[:, None])  # (n, 3, R, R)
        img += rng.normal(0, 8, img.shape)
        data.append(np.clip(img, 0, 255).astype(np.uint8).reshape(per_class, -1))
        labels.append(np.full(per_class, k + 1, dtype=np.int64))
    return np.concatenate(data), np.concatenate(labels)


# the commands whose failure leaves nothing to measure: the job ends there
REQUIRED = ("data_prep", "train", "bench")


def run(out: Path, name: str, argv: list[str], seconds: dict[str, float],
        failed: dict[str, str]) -> str:  # fmt: skip
    """`argv` run from the repository root, its stdout kept in OUT/NAME.log and returned; its
    wall seconds in `seconds[name]`. A failure of a REQUIRED command ends the job with its
    stderr's last lines; another's is kept in `failed` (in the report) and the job goes on."""
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    seconds[name] = round(time.perf_counter() - t0, 3)
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        failed[name] = f"exit {done.returncode}: {tail}"
        if name in REQUIRED:
            sys.exit(f"gpu_job.py: {name} failed (OUT/{name}.log): {failed[name]}")
    return done.stdout


def distcgan(*words: str) -> list[str]:
    return [sys.executable, "-m", "distcgan", *words]


def commands(out: Path, a: argparse.Namespace) -> dict[str, list[str]]:
    """The job's commands after the data, in order (bench comes after train, whose groups set
    its F)."""
    run_dir, dev = str(out / "run"), a.device
    return {
        "classifier": distcgan(
            "classifier", "train", str(out / "data.h5"), "--out", str(out / "classifier.pt"),
            "--epochs", str(a.classifier_epochs), "--devices", dev, "--no-progress",
        ),
        "train": [
            *distcgan("train"), "--preset", "imagenet32", "--data", str(out / "data.h5"),
            "--run", run_dir,
            "--steps", str(a.steps), "--batch-size", str(a.batch_size), "--fuse", a.fuse,
            "--amp", a.amp, "--devices", dev, "--no-progress",
        ],
        "sample": distcgan(
            "sample", "--run", run_dir, "--per-class", str(a.sample_per_class),
            "--out", str(out / "samples.h5"), "--devices", dev, "--no-progress",
        ),
        "evaluate": distcgan(
            "evaluate", "--run", run_dir, "--network", str(out / "classifier.pt"),
            "--n", str(a.eval_n), "--devices", dev, "--no-progress",
        ),
        "export": distcgan("export", "--run", run_dir, "--out", str(out / "export")),
    }  # fmt: skip


def bench_argv(a: argparse.Namespace, fuse: int) -> list[str]:
    """bench at the job's shape: its fused group (graphed on a GPU, as train ran it), or one
    pair where train fused nothing."""
    shape = ["--resolution", str(R), "--batch-size", str(a.batch_size), "--channels", "3"]
    shape += ["--amp", a.amp, "--device-g", a.device, "--windows", str(a.bench_windows)]
    shape += ["--steps", str(a.bench_steps), "--warmup", "2"]
    if fuse > 1:
        shape += ["--fuse", str(fuse)] + (["--cuda-graphs"] if a.device != "cpu" else [])
    return distcgan("bench", *shape)


def fused_groups(train_stdout: str) -> tuple[int, bool]:
    """The largest group train fused (1 if none) and whether any was graphed: its `fused`
    events, one JSON line each."""
    sizes, graphed = [1], False
    for line in train_stdout.splitlines():
        if line.startswith("{") and '"event": "fused"' in line:
            event = json.loads(line)
            sizes.append(len(event["classes"]))
            graphed = graphed or bool(event["cuda_graph"])
    return max(sizes), graphed


def split(summary: dict[str, Any], train_wall_s: float) -> dict[str, Any]:
    """train's wall seconds by what they went to: start-up (the process's seconds before the
    job's own clock began, imports and MPI, plus summary.json's `startup_s`), loading the
    classes' images, training (the slowest rank's), checkpoint and grid writes and scores (the
    rows' `checkpoint_s`, `grid_s`, `score_s`), and the rest (fusing, the graph's capture where
    train_s leaves it out, the summary, the exit)."""
    rows = summary["classes"]
    parts = {
        "startup_s": train_wall_s - summary["wall_s"] + summary["startup_s"],
        "load_s": sum(r.get("load_s") or 0.0 for r in rows),
        "train_s": summary["job"]["train_s"],
        **{k: sum(r.get(k) or 0.0 for r in rows) for k in ("checkpoint_s", "grid_s", "score_s")},
    }
    parts["other_s"] = train_wall_s - sum(parts.values())
    return {k: round(v, 3) for k, v in parts.items()}


def report(out: Path, a: argparse.Namespace, seconds: dict[str, float], bench: dict[str, Any],
           groups: tuple[int, bool]) -> dict[str, Any]:  # fmt: skip
    """The job's figures (OUT/job.json), from summary.json and bench's line."""
    summary = json.loads((out / "run" / "summary.json").read_text())
    rows = summary["classes"]
    parts = split(summary, seconds["train"])
    images_trained = summary["job"]["images"]
    step_img_s = bench.get("fused_img_s", bench.get("ours_img_s"))
    job_img_s = images_trained / seconds["train"]
    total_s = sum(seconds.values()) - seconds["bench"]  # the job: data to export
    return {
        "classes": a.classes,
        "steps": a.steps,
        "batch_size": a.batch_size,
        "amp": a.amp,
        "device": a.device,
        "fuse": groups[0],
        "graphed": groups[1],
        "images_trained": images_trained,
        "seconds": seconds,
        "train_split_s": parts,
        "train_shares": {k: round(v / seconds["train"], 4) for k, v in parts.items()},
        "job_shares": {k: round(v / total_s, 4) for k, v in seconds.items() if k != "bench"},
        "checkpoints": sum(r.get("checkpoints") or 0 for r in rows),
        "grids": sum(r.get("grids") or 0 for r in rows),
        "scores_in_training_s": parts["score_s"],  # --score-every 0, the default: `evaluate`
        "step_img_s": step_img_s,
        "train_img_s": summary["job"]["imgs_per_s"],
        "job_img_s": round(job_img_s, 1),
        "train_vs_step": round(summary["job"]["imgs_per_s"] / step_img_s, 4),
        "job_vs_step": round(job_img_s / step_img_s, 4),
        "bench": bench,
    }


def show(job: dict[str, Any]) -> None:
    print(
        f"one job: {job['classes']} classes x {job['steps']} steps of {job['batch_size']}, 32 px "
        f"RGB, amp {job['amp']}, on {job['device']}, fused {job['fuse']} at a time"
        + (", graphed" if job["graphed"] else "")
    )
    for name, s in job["seconds"].items():
        share = job["job_shares"].get(name)
        print(f"  {name:10s} {s:9.2f} s" + (f"  {100 * share:5.1f}% of the job" if share else ""))
    print("  train's wall time:")
    for name, s in job["train_split_s"].items():
        print(f"    {name[:-2]:12s} {s:9.2f} s  {100 * job['train_shares'][name]:5.1f}%")
    print(
        f"  {job['checkpoints']} checkpoint writes, {job['grids']} grids, "
        f"{job['scores_in_training_s']:.2f} s scoring while training"
        f"; images/s: step (bench) {job['step_img_s']:,.0f}, training {job['train_img_s']:,.0f} "
        f"({100 * job['train_vs_step']:.1f}% of the step), the job {job['job_img_s']:,.0f} "
        f"({100 * job['job_vs_step']:.1f}%)"
    )
    for name, why in job["failed"].items():
        print(f"  {name} FAILED ({why})")
    print(json.dumps(job), flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpu_job.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out", type=Path, help="a new folder for everything the job writes")
    p.add_argument("--device", default="cuda:0", help="cuda:N or cpu (default cuda:0)")
    p.add_argument("--classes", type=int, default=64, help="classes (default 64)")
    p.add_argument("--per-class", type=int, default=600, help="images a class (default 600)")
    p.add_argument("--steps", type=int, default=1000, help="train steps a class (default 1000)")
    p.add_argument("--batch-size", type=int, default=64, help="imagenet32's 64 by default")
    p.add_argument("--amp", default="bf16", choices=("bf16", "off"), help="default bf16")
    p.add_argument("--fuse", default="auto", help="train's --fuse (default auto)")
    p.add_argument("--classifier-epochs", type=int, default=2, help="default 2")
    p.add_argument("--sample-per-class", type=int, default=100, help="default 100")
    p.add_argument("--eval-n", type=int, default=10_000, help="evaluate's --n (default 10,000)")
    p.add_argument("--bench-windows", type=int, default=3, help="default 3")
    p.add_argument("--bench-steps", type=int, default=5, help="default 5")
    return p


def main() -> None:
    a = parser().parse_args()
    out = a.out.resolve()
    if out.exists():
        print(f"gpu_job.py: error: {out} exists: give a new folder (the job writes a run there)",
              file=sys.stderr)  # fmt: skip
        sys.exit(2)
    (out / "npz").mkdir(parents=True)
    seconds: dict[str, float] = {}
    failed: dict[str, str] = {}
    t0 = time.perf_counter()
    data, labels = images(a.classes, a.per_class)
    np.savez(out / "npz" / "train_data_batch_1.npz", data=data, labels=labels)
    seconds["images"] = round(time.perf_counter() - t0, 3)
    prep = [sys.executable, "-m", "data_prep", "imagenet-npz", "--src", str(out / "npz")]
    prep += ["--out", str(out / "data.h5"), "--resolution", str(R)]
    run(out, "data_prep", prep, seconds, failed)
    stdout = {
        name: run(out, name, argv, seconds, failed) for name, argv in commands(out, a).items()
    }
    groups = fused_groups(stdout["train"])
    bench = run(out, "bench", bench_argv(a, groups[0]), seconds, failed).strip().splitlines()[-1]
    job = {**report(out, a, seconds, json.loads(bench), groups), "failed": failed}
    (out / "job.json").write_text(json.dumps(job, indent=1) + "\n")
    show(job)


if __name__ == "__main__":
    main()
