"""Weak-scaling sweep: the same work per rank (one class of fixed steps) on 1, 2, 4... ranks.

    python jobs/weak_scaling.py --launcher local --ranks 1 2 --data data/digits16.h5 --out runs/weak
    python jobs/weak_scaling.py --launcher slurm --ranks 1 8 64 512 --data DATA --out DIR  # submits
    python jobs/weak_scaling.py --collect --ranks 1 8 64 512 --out DIR     # once the jobs are done

At each size R the run trains classes 0..R-1 on R ranks through the launch template of the
launcher (jobs/local.sh, jobs/lsf_jsrun.lsf, jobs/slurm.sbatch), so the sweep measures exactly
what users launch. Collecting reads every run's summary.json and env.json into DIR/weak_scaling.csv
and plots time and parallel efficiency against ranks in DIR/weak_scaling.png.

Efficiency is T(1)/T(R) with T the largest per-rank training time (work per rank is fixed, so
perfect weak scaling keeps it flat); the wall-clock efficiency is reported beside it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

JOBS = Path(__file__).resolve().parent
TEMPLATES = {"local": "local.sh", "lsf": "lsf_jsrun.lsf", "slurm": "slurm.sbatch"}
COLUMNS = [
    "ranks",
    "classes",
    "nodes",
    "train_s_max",
    "train_s_mean",
    "wall_s",
    "launch_wall_s",
    "startup_s",
    "load_s_max",
    "eval_s",
    "imgs_per_s",
    "efficiency",
    "wall_efficiency",
    "gpu_util_g",
    "gpu_util_d",
]


def run_dir(out: Path, ranks: int) -> Path:
    return out / f"ranks_{ranks:05d}"


def launch(args: argparse.Namespace, ranks: int) -> float | None:
    """Run (local) or submit (lsf, slurm) the size-`ranks` job; returns local wall seconds."""
    run = run_dir(args.out, ranks)
    classes = " ".join(str(k) for k in range(ranks))
    extra = f"--classes {classes} --steps {args.steps} --no-progress {args.extra}".strip()
    if run.exists():
        extra += " --overwrite"  # a sweep re-measures; each size's directory is the sweep's own
    env = {
        **os.environ,
        "DATA": str(args.data),
        "RUN": str(run),
        "RANKS": str(ranks),
        "PRESET": args.preset,
        "EXTRA": extra,
        "PYTHON": sys.executable,
    }
    template = str(JOBS / TEMPLATES[args.launcher])
    if args.launcher == "local":
        env.setdefault("MPIEXEC", str(Path(sys.executable).parent / "mpiexec"))
        t0 = time.perf_counter()
        result = subprocess.run(["bash", template], env=env)
        if result.returncode != 0:
            sys.exit(f"weak_scaling: the run on {ranks} rank(s) failed (exit {result.returncode})")
        return time.perf_counter() - t0
    per_node = args.ranks_per_node
    nodes = math.ceil(ranks / per_node)
    env["NODES"] = str(nodes)
    if args.launcher == "lsf":
        cmd = ["bsub", "-nnodes", str(nodes), "-W", args.walltime, *args.submit_args, template]
    else:
        cmd = ["sbatch", "-N", str(nodes), "-t", args.walltime, *args.submit_args, template]
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, env=env, check=True)
    return None


def collect_row(out: Path, ranks: int, launch_wall_s: float | None) -> dict[str, object]:
    run = run_dir(out, ranks)
    summary = json.loads((run / "summary.json").read_text())
    env = json.loads((run / "env.json").read_text())
    per_rank: dict[int, dict[str, float]] = {}
    for c in summary["classes"]:
        r = per_rank.setdefault(c["rank"], {"train_s": 0.0, "load_s": 0.0})
        r["train_s"] += c.get("train_s", 0.0)
        r["load_s"] += c.get("load_s", 0.0)
    train = [r["train_s"] for r in per_rank.values()]
    images = sum(c["steps"] * summary_batch(run) for c in summary["classes"])
    gpu = summary.get("gpu", {})
    evaluation = run / "evaluation.json"
    return {
        "ranks": summary["ranks"],
        "classes": len(summary["classes"]),
        "nodes": len(env["hosts"]),
        "train_s_max": round(max(train), 3),
        "train_s_mean": round(sum(train) / len(train), 3),
        "wall_s": summary["wall_s"],
        "launch_wall_s": round(launch_wall_s, 3) if launch_wall_s else "",
        "startup_s": summary["startup_s"],
        "load_s_max": round(max(r["load_s"] for r in per_rank.values()), 3),
        "eval_s": json.loads(evaluation.read_text()).get("seconds", "")
        if evaluation.exists()
        else "",
        "imgs_per_s": round(images / max(train), 1),
        "gpu_util_g": gpu.get("util_g_mean", ""),
        "gpu_util_d": gpu.get("util_d_mean", ""),
    }


def summary_batch(run: Path) -> int:
    return int(json.loads((run / "config.json").read_text())["batch_size"])


def write_outputs(out: Path, rows: list[dict[str, object]]) -> None:
    sys.path.insert(0, str(JOBS.parent))
    from distcgan.run.atomic import atomic_path, atomic_write_bytes

    rows.sort(key=lambda r: r["ranks"])
    base = rows[0]
    for r in rows:
        r["efficiency"] = round(float(base["train_s_max"]) / float(r["train_s_max"]), 3)
        r["wall_efficiency"] = round(float(base["wall_s"]) / float(r["wall_s"]), 3)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(out / "weak_scaling.csv", buf.getvalue().encode())
    print(buf.getvalue(), end="")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = [r["ranks"] for r in rows]
    fig, (ax_t, ax_e) = plt.subplots(1, 2, figsize=(10, 4))
    ax_t.plot(ranks, [r["train_s_max"] for r in rows], "o-", label="training (slowest rank)")
    ax_t.plot(ranks, [r["wall_s"] for r in rows], "s--", label="wall, whole job")
    ax_t.set(xscale="log", xlabel="ranks (= classes)", ylabel="seconds", title="Weak scaling")
    ax_t.set_ylim(bottom=0)
    ax_t.legend()
    ax_e.plot(ranks, [r["efficiency"] for r in rows], "o-", label="training")
    ax_e.plot(ranks, [r["wall_efficiency"] for r in rows], "s--", label="wall")
    ax_e.axhline(1.0, color="grey", lw=0.5)
    ax_e.set(
        xscale="log",
        xlabel="ranks (= classes)",
        ylabel="T(1) / T(R)",
        title="Parallel efficiency",
        ylim=(0, 1.2),
    )
    ax_e.legend()
    fig.tight_layout()
    with atomic_path(out / "weak_scaling.png") as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    print(f"wrote {out / 'weak_scaling.csv'} and {out / 'weak_scaling.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=sorted(TEMPLATES), default="local")
    parser.add_argument("--ranks", type=int, nargs="+", required=True)
    parser.add_argument("--data", type=Path, default=Path("data/digits16.h5"))
    parser.add_argument("--out", type=Path, default=Path("runs/weak_scaling"))
    parser.add_argument("--preset", default="digits")
    parser.add_argument("--steps", type=int, default=300, help="steps per class (= per rank)")
    parser.add_argument("--extra", default="", help="more distcgan train flags")
    parser.add_argument("--collect", action="store_true", help="only collect finished runs")
    parser.add_argument("--ranks-per-node", type=int, default=3, help="for lsf/slurm")
    parser.add_argument("--walltime", default="0:30", help="for lsf/slurm")
    parser.add_argument("--submit-args", nargs="*", default=[], help="e.g. -P PROJ / -A PROJ")
    args = parser.parse_args()
    if any(r < 1 for r in args.ranks):
        parser.error("--ranks must be positive")
    args.out.mkdir(parents=True, exist_ok=True)
    walls: dict[int, float | None] = {r: None for r in args.ranks}
    if not args.collect:
        for r in args.ranks:
            walls[r] = launch(args, r)
        if args.launcher != "local":
            print(
                f"submitted; when the jobs are done: python {sys.argv[0]} --collect --ranks "
                f"{' '.join(map(str, args.ranks))} --out {args.out}"
            )
            return
    missing = [r for r in args.ranks if not (run_dir(args.out, r) / "summary.json").exists()]
    if missing:
        sys.exit(f"weak_scaling: no summary.json yet for ranks {missing} under {args.out}")
    write_outputs(args.out, [collect_row(args.out, r, walls[r]) for r in args.ranks])


if __name__ == "__main__":
    main()
