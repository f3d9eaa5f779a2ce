"""Does training fused change what per-class DC-GANs learn? Paired run seeds, alone against fused.

    python benchmarks/fused_quality.py --seeds 8 [--first-seed 0] [--fuse 5] [--ranks 2] \
        [--data data/digits16.h5] [--network data/digits16_classifier.pt] [--out runs/fq]

For each run seed S it trains and scores the per-class variant twice with `distcgan compare`
(digits preset, the paper's dropout 0.25 in D): once with --fuse 1 (each class alone), once with
--fuse F, into OUT/alone/seed-S and OUT/fused/seed-S. The two arms of a seed run one after the
other, so a change in the machine's load falls on both. A seed already scored is not retrained
(compare --resume), so the experiment grows with a larger --seeds.

Everything but D's dropout masks is per class in both arms (init, noise, batch order); the masks
come from the device's random stream drawn for the fused tensor, so they depend on F. With
dropout 0 the two arms give the same weights (tests/test_fused.py); this measures what the masks
and the kernels' rounding do to the scores. It prints, per metric, each arm's mean and the
paired difference fused - alone with its Student-t 95% interval over the seeds, then one JSON
line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from distcgan.compare.seeds import paired

REPO = Path(__file__).resolve().parent.parent
METRICS = ("is_mean", "fid", "precision", "recall", "class_accuracy", "train_s")


def arm(args: argparse.Namespace, name: str, fuse: int, seed: int) -> dict:
    """Train and score one arm of one seed (or reuse it); its compare row."""
    out = Path(args.out) / name / f"seed-{seed}"
    row = out / "per-class" / "row.json"
    cmd = [
        *args.mpiexec.split(), "-n", str(args.ranks), sys.executable, "-m", "mpi4py",
        "-m", "distcgan", "compare", "--preset", "digits", "--variants", "per-class",
        "--seed", str(seed), "--seeds", "1", "--fuse", str(fuse), "--no-real",
        "--data", args.data, "--network", args.network, "--out", str(out), "--no-progress",
    ]  # fmt: skip
    if (out / "compare-config.json").exists():
        cmd.append("--resume")
    print(f"== {name} seed {seed}: {' '.join(cmd)}", flush=True)
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(row.read_text())["row"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=8, help="run seeds (default 8)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--fuse", type=int, default=5, help="the fused arm's --fuse (default 5)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mpiexec", default=str(Path(sys.executable).parent / "mpiexec"))
    p.add_argument("--data", default="data/digits16.h5")
    p.add_argument("--network", default="data/digits16_classifier.pt")
    p.add_argument("--out", default="runs/fused_quality")
    args = p.parse_args()
    if args.seeds < 1 or args.fuse < 2:
        p.error("--seeds must be at least 1 and --fuse at least 2 (1 is the alone arm)")
    for f in (args.data, args.network):
        if not Path(REPO, f).exists():
            p.error(f"{f} does not exist: run `make demo` once (it makes both), or pass its path")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    rows = {"alone": [], "fused": []}
    for s in seeds:
        rows["alone"].append(arm(args, "alone", 1, s))
        rows["fused"].append(arm(args, "fused", args.fuse, s))

    result = {"seeds": list(seeds), "fuse": args.fuse, "metrics": {}}
    print(f"\n{len(seeds)} seeds, --fuse 1 against --fuse {args.fuse}")
    print(f"{'metric':<16}{'alone':>10}{'fused':>10}   fused - alone (95%)")
    for m in METRICS:
        a = [float(r[m]) for r in rows["alone"]]
        b = [float(r[m]) for r in rows["fused"]]
        d = paired(a, b)
        half = f" +- {d['half']:.3f}" if d["half"] is not None else ""
        print(f"{m:<16}{sum(a) / len(a):>10.3f}{sum(b) / len(b):>10.3f}   {d['mean']:+.3f}{half}")
        result["metrics"][m] = {"alone": a, "fused": b, "diff": d}
    fids = {k: [v for r in rows[k] for v in r["per_class_fid"].values()] for k in rows}
    print(
        "per-class FID, every class of every seed: "
        + ", ".join(f"{k} {sum(v) / len(v):.2f} (n = {len(v)})" for k, v in fids.items())
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
