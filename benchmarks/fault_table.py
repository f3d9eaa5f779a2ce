"""Measure what each injected fault costs: time for the job to end, steps lost, and whether the
final weights match an uninterrupted run.

    python benchmarks/fault_table.py [--data data/digits16.h5] [--out /tmp/fault_table]

Every scenario is a real `mpiexec -n 2` run of the tiny preset (4 classes, 60 steps, checkpoint
every 10, one thread per rank, CPU). "steps lost" is the largest number of steps any class had to
redo; "matches" compares every class's final G weights with a straight one-process run.
The pass/fail versions of these scenarios are in tests/faults/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from distcgan.run.checkpoint import read  # noqa: E402

STEPS, EVERY = 60, 10
COMMON = [
    "--preset",
    "tiny",
    "--classes",
    "0",
    "1",
    "2",
    "3",
    "--steps",
    str(STEPS),
    "--checkpoint-every",
    str(EVERY),
    "--log-every",
    "1",
    "--devices",
    "cpu",
    "--threads",
    "1",
    "--no-progress",
]


def cmd(*args: str, ranks: int | None = 2) -> list[str]:
    py = (
        [sys.executable, "-m", "mpi4py", "-m", "distcgan"]
        if ranks
        else [sys.executable, "-m", "distcgan"]
    )
    mpi = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(ranks)] if ranks else []
    return [*mpi, *py, *args]


def run(*args: str, ranks: int | None = 2) -> tuple[int, float, str]:
    t0 = time.monotonic()
    p = subprocess.run(cmd(*args, ranks=ranks), capture_output=True, text=True, cwd=REPO)
    return p.returncode, time.monotonic() - t0, p.stdout


def ended_after(run_dir: Path, class_id: int) -> str:
    """Seconds from the failing class's last metrics line (the fault's moment) to now."""
    path = run_dir / f"class_{class_id:03d}" / "metrics.jsonl"
    return f"{time.time() - path.stat().st_mtime:.1f}"


def progress(run_dir: Path) -> dict[int, int]:
    """Last logged step of each class (log_every 1: where each class was when the job ended)."""
    out = {}
    for k in range(4):
        path = run_dir / f"class_{k:03d}" / "metrics.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        out[k] = json.loads(lines[-1])["step"] if lines else 0
    return out


def restarts(stdout: str) -> dict[int, int]:
    starts = {}
    for line in stdout.splitlines():
        if line.startswith('{"rank"'):
            e = json.loads(line)
            if e["event"] == "class_start":
                starts[e["class_id"]] = e["start_step"]
    return starts


def matches(a: Path, b: Path) -> bool:
    for k in range(4):
        x, y = (read(r / f"class_{k:03d}" / "checkpoint.pt") for r in (a, b))
        if not all(torch.equal(x["G"][n], y["G"][n]) for n in x["G"]):
            return False
    return True


def lost(before: dict[int, int], starts: dict[int, int]) -> int:
    return max((before[k] - s for k, s in starts.items()), default=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / "data" / "digits16.h5"))
    parser.add_argument("--out", default="/tmp/fault_table")
    args = parser.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    data = ["--data", args.data]
    straight = out / "straight"
    run("train", "--run", str(straight), *data, *COMMON, ranks=None)
    rows = []

    def resume(run_dir: Path, ranks: int = 2) -> tuple[int, str]:
        rc, _, stdout = run(
            "train", "--run", str(run_dir), "--resume", "--no-progress", ranks=ranks
        )
        assert rc == 0, f"resume of {run_dir} failed"
        return rc, stdout

    # kill -9 of rank 1 in the middle of class 3, then resume on 3 ranks
    d = out / "kill"
    rc, secs, _ = run("train", "--run", str(d), *data, *COMMON, "--inject-fault", "kill:3:35")
    secs = ended_after(d, 3)
    before = progress(d)
    _, stdout = resume(d, ranks=3)
    rows.append(
        (
            "kill -9 of rank 1 (resume on 3 ranks)",
            secs,
            lost(before, restarts(stdout)),
            matches(straight, d),
        )
    )

    # SIGTERM to mpiexec mid-training, then resume
    d = out / "sigterm"
    p = subprocess.Popen(
        cmd("train", "--run", str(d), *data, *COMMON),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in p.stdout:  # wait until rank 1 trains its second class
        event = json.loads(line) if line.startswith('{"rank"') else {}
        if event.get("event") == "class_start" and event.get("class_id") == 3:
            break
    else:
        raise SystemExit("the SIGTERM run ended before class 3 started: nothing to measure")
    time.sleep(0.5)  # into class 3 (60 steps take a few seconds): a signal mid-class
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.wait()
    secs = time.monotonic() - t0
    before = progress(d)
    _, stdout = resume(d)
    rows.append(
        (
            f"SIGTERM to mpiexec (exit {p.returncode})",
            f"{secs:.1f}",
            lost(before, restarts(stdout)),
            matches(straight, d),
        )
    )

    # damaged newest checkpoint of every class (flipped byte), then resume with more steps
    d = out / "damaged"
    run("train", "--run", str(d), *data, *COMMON)
    for k in range(4):
        path = d / f"class_{k:03d}" / "checkpoint.pt"
        raw = bytearray(path.read_bytes())
        raw[-100] ^= 1
        path.write_bytes(bytes(raw))
    before = progress(d)
    _, stdout = resume(d)
    rows.append(
        (
            "flipped byte in every checkpoint.pt",
            "-",
            lost(before, restarts(stdout)),
            matches(straight, d),
        )
    )

    # injected full disk at class 1's checkpoint at step 30, then resume
    d = out / "enospc"
    rc, secs, _ = run("train", "--run", str(d), *data, *COMMON, "--inject-fault", "enospc:1:30")
    secs = ended_after(d, 1)
    before = progress(d)
    _, stdout = resume(d)
    rows.append(
        (
            f"disk full at a checkpoint (exit {rc})",
            secs,
            lost(before, restarts(stdout)),
            matches(straight, d),
        )
    )

    # NaN once in class 2: rolled back in the same job
    d = out / "nan"
    rc, secs, stdout = run("train", "--run", str(d), *data, *COMMON, "--inject-fault", "nan:2:25")
    back = [json.loads(x) for x in stdout.splitlines() if '"rollback"' in x]
    rows.append(
        (
            f"NaN loss in class 2 (exit {rc})",
            "-",
            back[0]["diverged_at"] - back[0]["back_to"] if back else "?",
            f"{matches(straight, d)} (new noise seed by design)",
        )
    )

    # a rank failing while the other waits to gather samples
    rc, secs, _ = run(
        "sample",
        "--run",
        str(straight),
        "--per-class",
        "8",
        "--out",
        str(out / "s.h5"),
        "--overwrite",  # a second run of this script into the same --out
        "--inject-fault",
        "raise:3:0",
    )
    rows.append(
        (f"exception on rank 1 while sampling (exit {rc}; whole command)", f"{secs:.1f}", 0, "-")
    )

    width = max(len(r[0]) for r in rows)
    print(f"{'fault'.ljust(width)}  ended after (s)  steps lost  matches uninterrupted")
    for name, secs, steps, same in rows:
        print(f"{name.ljust(width)}  {secs:>15}  {steps!s:>10}  {same}")


if __name__ == "__main__":
    main()
