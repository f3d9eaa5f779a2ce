"""Weak-scaling sweep: the same work per rank (K classes of fixed steps) on 1, 2, 4... ranks.

    python jobs/weak_scaling.py --launcher local --ranks 1 2 --data data/digits16.h5 \
        --preset digits --steps 300 --out runs/weak
    python jobs/weak_scaling.py --launcher slurm --ranks 1 8 64 512 --data DATA \
        --preset imagenet32 --steps 2000 --out DIR --submit-args='-A PROJ'          # submits
    python jobs/weak_scaling.py --collect --ranks 1 8 64 512 --out DIR     # once the jobs are done
    python jobs/weak_scaling.py --launcher slurm ... --wait                # submit, wait, collect
    python jobs/weak_scaling.py --launcher slurm ... --classes-per-rank 10              # fused
    python jobs/weak_scaling.py --launcher lsf --ranks 3 24 --data DATA --preset imagenet64 \
        --steps 2000 --out DIR --submit-args='-P PROJ'   # bsub -nnodes N ... jobs/lsf_jsrun.lsf

--preset is required (the templates' PRESET has no default either: a preset sets the
steps, batch and checkpoint interval, not only the resolution).

At each size R the run trains classes 0..R*K-1 on exactly R ranks, K classes a rank
(--classes-per-rank K, default 1; above 1 each rank trains its K as one fused pair, the fused G
on one GPU and the fused D on another; --classes-per-gpu is its deprecated name), through the
launch template of the launcher (jobs/local.sh, jobs/lsf_jsrun.lsf, jobs/slurm.sbatch), so the
sweep measures exactly what users launch; a scheduler gets ceil(R / ranks-per-node) nodes, by the
templates' own rule (distcgan/run/jobplan.py). Collecting reads every run's
summary.json and env.json into DIR/weak_scaling.csv and plots time and parallel efficiency
against ranks in DIR/weak_scaling.png.

Run again into the same DIR, the sweep continues: a size whose run is complete at the asked
--steps is skipped, any other continues from its checkpoints (the templates add --resume).
--overwrite deletes the sizes' runs first and measures them afresh. A size whose run trained
another set of classes (another --classes-per-rank) is refused with one line: --overwrite, or
another --out.

Efficiency is T(1)/T(R) with T the largest per-rank training time (work per rank is fixed, so
perfect weak scaling keeps it flat); the wall-clock efficiency is reported beside it.
"""

from __future__ import annotations

import argparse
import csv
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

JOBS = Path(__file__).resolve().parent
sys.path.insert(0, str(JOBS.parent))  # a script run from anywhere: distcgan from this checkout

from distcgan.config import PRESETS  # noqa: E402
from distcgan.errors import UserError  # noqa: E402
from distcgan.options import (  # noqa: E402
    WeakScalingOptions,
    add_options,
    command_texts,
    options_from,
)
from distcgan.progress import bar  # noqa: E402
from distcgan.run.atomic import atomic_path, atomic_write_bytes  # noqa: E402
from distcgan.run.jobplan import JobAsk, JobPlan, plan_job  # noqa: E402
from distcgan.run.rundir import LOCK, RunDir  # noqa: E402
from distcgan.run.supervise import run_status  # noqa: E402

TEMPLATES = {"local": "local.sh", "lsf": "lsf_jsrun.lsf", "slurm": "slurm.sbatch"}
SLURM_GPUS_PER_NODE = 4  # a Slurm GPU node unless --gpus-per-node says (LSF: Summit's, jobplan)
# The templates' time-limit warning comes this long before the end (#SBATCH --signal=USR1@600,
# #BSUB -wt 10): a shorter walltime warns each part of the job at its start.
WARNING_LEAD_MIN = 10
COLUMNS = [
    "ranks",
    "classes",
    "classes_per_rank",
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


def scheduler_walltime(minutes: int, launcher: str) -> str:
    """The walltime in the scheduler's own format: Slurm -t HH:MM:SS, LSF -W HH:MM."""
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:00" if launcher == "slurm" else f"{h}:{m:02d}"


def plan(args: WeakScalingOptions, ranks: int) -> JobPlan:
    """Size `ranks` laid out by the templates' own rule (distcgan/run/jobplan.py): the ranks a
    node holds (--ranks-per-node, else what a node's cores and GPUs hold: Summit's node under
    LSF, --gpus-per-node GPUs under Slurm) and the nodes `ranks` fill."""
    if args.launcher == "slurm" and args.gpus_per_rank == 0 and not args.ranks_per_node:
        sys.exit("weak_scaling: with --gpus-per-rank 0 (CPUs), give --ranks-per-node")
    gpus_per_node = args.gpus_per_node
    if gpus_per_node is None and args.launcher == "slurm":
        gpus_per_node = SLURM_GPUS_PER_NODE
    ask = JobAsk(
        scheduler=args.launcher, classes_per_rank=args.classes_per_rank, ranks=ranks,
        ranks_per_node=args.ranks_per_node, gpus_per_rank=args.gpus_per_rank,
        gpus_per_node=gpus_per_node,
    )  # fmt: skip
    try:
        return plan_job(ask)
    except UserError as exc:
        sys.exit(f"weak_scaling: {exc}")


def submit_command(args: WeakScalingOptions, ranks: int) -> list[str]:
    """The bsub/sbatch line for size `ranks`: exactly `ranks` tasks, ceil(ranks / per node)
    nodes; --submit-args last, so that they win."""
    layout = plan(args, ranks)
    per_node, nodes = layout.ranks_per_node, layout.nodes
    log = str(args.out / f"{run_dir(args.out, ranks).name}.%j.out")
    walltime = scheduler_walltime(args.walltime, args.launcher)
    if args.launcher == "lsf":  # the script as bsub's argument, as Summit wants (the template's
        # header: bsub reads its #BSUB lines where lsf.conf sets LSB_BSUB_PARSE_SCRIPT=Y)
        template = str(JOBS / TEMPLATES["lsf"])
        return ["bsub", "-nnodes", str(nodes), "-W", walltime, *args.submit_args, template]
    gpus = ["--gpus-per-task", str(args.gpus_per_rank)] if args.gpus_per_rank else []
    # No more tasks a node than the job has: Slurm refuses `--ntasks 1 --ntasks-per-node 2` with
    # --gpus-per-task ("Requested node configuration is not available").
    per_node = min(per_node or ranks, ranks)
    return [
        "sbatch", "--parsable", "--nodes", str(nodes), "--ntasks", str(ranks),
        "--ntasks-per-node", str(per_node), "--cpus-per-task", str(args.cpus_per_rank), *gpus,
        "-t", walltime, "--output", log, *args.submit_args, str(JOBS / TEMPLATES["slurm"]),
    ]  # fmt: skip


def size_classes(args: WeakScalingOptions, ranks: int) -> list[int]:
    """The classes size `ranks` trains: K a rank."""
    return list(range(ranks * (args.classes_per_rank or 1)))  # check_args has set it


def complete(args: WeakScalingOptions, ranks: int) -> bool:
    """Whether size `ranks` already has a complete run at the asked --steps. Exits with one
    line if its run trained other classes: continuing it would mix two sweeps."""
    run = RunDir(run_dir(args.out, ranks))
    if not run.is_run():
        return False
    config = run.read_config()
    want = size_classes(args, ranks)
    if list(config.classes) != want:
        sys.exit(
            f"weak_scaling: {run.path} trained {len(config.classes)} classes on {ranks} rank(s), "
            f"not the {len(want)} of --classes-per-rank {args.classes_per_rank}: add --overwrite "
            "to re-measure it, or use another --out"
        )
    return config.steps == args.steps and run_status(run.path)[0] == 0


def unfinished_reason(out: Path, ranks: int) -> str:
    """Why size `ranks` cannot be collected ("" when its last launch completed): a run stopped
    by a signal or given up has a summary too, but its steps are not the sweep's work."""
    run = run_dir(out, ranks)
    if not RunDir(run).is_run():
        return f"{run}: no run yet"
    code, message = run_status(run)
    return "" if code == 0 else message


def remove_run(run: Path) -> None:
    """--overwrite: delete a size's run, unless a job holds its lock (distcgan/run/rundir.py)."""
    if not RunDir(run).is_run():
        sys.exit(f"weak_scaling: {run} is not a distcgan run (no config.json): not deleting it")
    with open(run / LOCK, "a") as fh:  # the lock a running job holds (rundir.lock)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            sys.exit(f"weak_scaling: {run} is in use by a running job: not deleting it")
        shutil.rmtree(run)


def local_mpiexec(env: dict[str, str]) -> str | None:
    """The mpiexec local.sh runs: MPIEXEC where set, else the one beside this Python (a venv's
    mpich), else None: local.sh's default, mpiexec on PATH (an MPI installed under another
    prefix, e.g. `pip install --prefix /tmp/mpi mpich`, has none beside the Python)."""
    if env.get("MPIEXEC"):
        return env["MPIEXEC"]
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else None


def launch(args: WeakScalingOptions, ranks: int) -> float | str | None:
    """Run (local) or submit (lsf, slurm) the size-`ranks` job: local wall seconds, or the
    scheduler's job id, or None (a dry run)."""
    run = run_dir(args.out, ranks)
    classes = " ".join(str(k) for k in size_classes(args, ranks))
    extra = f"--classes {classes} --steps {args.steps} --no-progress {args.extra}".strip()
    env = {
        **os.environ,
        "DATA": str(args.data),
        "RUN": str(run),
        "RANKS": str(ranks),
        "PRESET": args.preset or "",  # check_args: given but with --collect
        "EXTRA": extra,
        "PYTHON": sys.executable,
        "GPUS_PER_RANK": str(args.gpus_per_rank),
        "CLASSES_PER_RANK": str(args.classes_per_rank),
    }
    template = JOBS / TEMPLATES[args.launcher]
    if args.launcher == "local":
        beside = local_mpiexec(env)
        if beside:
            env["MPIEXEC"] = beside
        if args.dry_run:
            print(f"RANKS={ranks} CLASSES_PER_RANK={args.classes_per_rank} bash {template}")
            return None
        t0 = time.perf_counter()
        result = subprocess.run(["bash", str(template)], env=env)
        if result.returncode != 0:
            sys.exit(f"weak_scaling: the run on {ranks} rank(s) failed (exit {result.returncode})")
        return time.perf_counter() - t0
    # The LSF template lays out resource sets by the same rule; hand it the layout the node
    # request was made for, so that an explicit --ranks-per-node reaches it too.
    layout = plan(args, ranks)
    env["NODES"], env["RANKS_PER_NODE"] = str(layout.nodes), str(layout.ranks_per_node)
    cmd = submit_command(args, ranks)
    print(" ".join(cmd), flush=True)
    if args.dry_run:
        return None
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"weak_scaling: {cmd[0]} failed for {ranks} rank(s) (exit {out.returncode})")
    print(out.stdout, end="", flush=True)
    if args.launcher == "lsf":  # "Job <1234> is submitted to queue <batch>."
        found = re.search(r"Job <(\d+)>", out.stdout)
        return found.group(1) if found else "submitted"
    return out.stdout.strip().split(";")[0]


# Slurm's job states that end a job for good (a requeued job passes REQUEUED, then PENDING;
# any state not listed here, SIGNALING or COMPLETING say, is still under way).
ENDED = {
    "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
    "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED",
}  # fmt: skip


def wait_slurm(job_ids: list[str], poll_s: float = 5.0) -> None:
    """Block until every one of these Slurm jobs has ended (once squeue forgets a job, after
    MinJobAge, it has ended too)."""
    while True:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i %T", "-j", ",".join(job_ids)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if out.returncode != 0 and "Invalid job id" not in out.stderr:
            sys.exit(f"weak_scaling: squeue failed: {out.stderr.strip()}")
        if all(line.split()[1] in ENDED for line in out.stdout.splitlines()):
            return
        time.sleep(poll_s)


def collect_row(out: Path, ranks: int, launch_wall_s: float | None) -> dict[str, Any]:
    rd = RunDir(run_dir(out, ranks))
    summary, env = rd.read_summary(), rd.read_env()
    rows = rd.summary_rows()  # a collected size completed: every row was trained
    config = rd.read_config()
    batch = config.batch_size
    per_rank: dict[int, dict[str, float]] = {}
    for c in rows:
        r = per_rank.setdefault(c.rank, {"train_s": 0.0, "load_s": 0.0})
        r["train_s"] += c.train_s or 0.0
        r["load_s"] += c.load_s or 0.0
    train = [r["train_s"] for r in per_rank.values()]
    images = sum((c.steps or 0) * batch for c in rows)
    gpu = summary.get("gpu", {})
    # `distcgan evaluate` writes RUN/evaluate-NETWORK.json; the newest one, if any.
    evaluations = rd.evaluations()
    return {
        "ranks": summary["ranks"],
        "classes": len(rows),
        "classes_per_rank": config.fuse if config.fuse.isdigit() else "",
        "nodes": len(env["hosts"]),
        "train_s_max": round(max(train), 3),
        "train_s_mean": round(sum(train) / len(train), 3),
        "wall_s": summary["wall_s"],
        "launch_wall_s": round(launch_wall_s, 3) if launch_wall_s else "",
        "startup_s": summary["startup_s"],
        "load_s_max": round(max(r["load_s"] for r in per_rank.values()), 3),
        "eval_s": json.loads(evaluations[-1].read_text()).get("eval_s", "") if evaluations else "",
        "imgs_per_s": round(images / max(train), 1),
        "gpu_util_g": gpu.get("util_g_mean", ""),
        "gpu_util_d": gpu.get("util_d_mean", ""),
    }


def write_outputs(out: Path, rows: list[dict[str, Any]]) -> None:
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

    import matplotlib  # about a second: only collecting draws (not --help, a dry run, a launch)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): no display needed

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


def classes_per_rank(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Sets args.classes_per_rank from --classes-per-rank or its deprecated --classes-per-gpu
    (default 1), or exits with one line: not a positive number, or the two disagree."""
    new, old = args.classes_per_rank, args.classes_per_gpu
    if new is not None and old is not None and new != old:
        parser.error(
            f"--classes-per-rank {new} and --classes-per-gpu {old} disagree: give "
            "--classes-per-rank alone (--classes-per-gpu is its deprecated name)"
        )
    flag = "--classes-per-rank" if new is not None or old is None else "--classes-per-gpu"
    args.classes_per_rank = new if new is not None else old if old is not None else 1
    if args.classes_per_rank < 1:
        parser.error(f"{flag} must be a positive number of classes")
    if old is not None:
        print(
            "weak_scaling: note: --classes-per-gpu is deprecated, use --classes-per-rank",
            file=sys.stderr,
        )


def parse_args(argv: list[str] | None = None) -> WeakScalingOptions:
    """The sweep's options (options.WeakScalingOptions), or one line and exit 2."""
    parser = argparse.ArgumentParser(description=command_texts(WeakScalingOptions)["help"])
    add_options(parser, WeakScalingOptions, {"slurm_gpus_per_node": str(SLURM_GPUS_PER_NODE)})
    args = parser.parse_args(argv)
    check_args(parser, args, list(PRESETS))
    opts: WeakScalingOptions = options_from(WeakScalingOptions, args)
    return opts


def check_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, presets: list[str]
) -> None:
    """Exits with one line (parser.error) for arguments that parse but do not go together."""
    if any(r < 1 for r in args.ranks):
        parser.error("--ranks must be positive")
    classes_per_rank(parser, args)
    if args.preset is None and not args.collect:
        parser.error(
            f"--preset is required: the preset of your data, one of {', '.join(presets)} "
            "(e.g. --preset imagenet32)"
        )
    if args.wait and args.launcher != "slurm":
        parser.error("--wait is for --launcher slurm (LSF: --collect once the jobs are done)")
    if args.launcher != "local" and not args.collect and args.walltime <= WARNING_LEAD_MIN:
        parser.error(
            f"--walltime {args.walltime} min is within the templates' {WARNING_LEAD_MIN}-minute "
            "warning lead: every part of each job would be warned at once and requeued without "
            f"training; give more than {WARNING_LEAD_MIN} minutes"
        )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    walls: dict[int, float | None] = {r: None for r in args.ranks}
    if not args.collect:
        jobs = []
        sizes = bar(len(args.ranks), "sizes", "run", args.progress and not args.dry_run)
        for r in args.ranks:
            sizes.update(1)
            if args.overwrite and run_dir(args.out, r).exists() and not args.dry_run:
                remove_run(run_dir(args.out, r))
            if complete(args, r):
                print(f"{run_dir(args.out, r)}: complete, skipped (--overwrite re-measures)")
                continue
            launched = launch(args, r)
            if isinstance(launched, float):
                walls[r] = launched
            elif launched is not None:
                jobs.append(launched)
        sizes.close()
        if args.dry_run:
            return
        if args.wait and jobs:
            wait_slurm(jobs)
        elif args.launcher != "local" and jobs:
            print(
                f"submitted; when the jobs are done: python {sys.argv[0]} --collect --ranks "
                f"{' '.join(map(str, args.ranks))} --out {args.out}"
            )
            return
    unfinished = {r: why for r in args.ranks if (why := unfinished_reason(args.out, r))}
    if unfinished:
        first = next(iter(unfinished.values()))
        sys.exit(
            f"weak_scaling: ranks {sorted(unfinished)} under {args.out} are not complete "
            f"({first}): wait for their jobs, or run the sweep again to continue them"
        )
    write_outputs(args.out, [collect_row(args.out, r, walls[r]) for r in args.ranks])


if __name__ == "__main__":
    main()
