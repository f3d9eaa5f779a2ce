"""Does augmenting D's inputs (--augment) help? Paired run seeds, each variant with and without.

    python benchmarks/augment_quality.py --seeds 5 [--variants per-class gan cgan] \
        [--augment color,translation,cutout] [--augment-p 1] [--steps 900] [--ranks 2] \
        [--data data/digits16.h5] [--network data/digits16_classifier.pt] [--out runs/aq]

For each run seed S it trains and scores the variants twice with `distcgan compare` (digits
preset): once as the paper trains (--augment none), once with --augment POLICY, into
OUT/none/seed-S and OUT/augmented/seed-S; the two arms of a seed run one after the other, so a
change in the machine's load falls on both. A seed already scored is not retrained (compare
--resume), so the experiment grows with a larger --seeds. For 32 px, pass --resolution 32, --data of
the digits at 32 px (`python -m data_prep digits --resolution 32`) and a classifier trained on it.

It prints, per variant and metric, each arm's mean and the paired difference augmented - none
with its Student-t 95% interval over the seeds, and a verdict: "helps" or "hurts" where the
interval excludes 0, "cannot tell" where it does not; then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from distcgan.compare.seeds import paired, verdict

REPO = Path(__file__).resolve().parent.parent
# Each metric, and whether higher is better.
METRICS = {"is_mean": True, "fid": False, "precision": True, "recall": True, "class_accuracy": True}


def arm(args: argparse.Namespace, name: str, seed: int) -> dict[str, dict]:
    """Train and score one arm of one seed (or reuse it); its compare rows by variant."""
    out = Path(args.out) / name / f"seed-{seed}"
    cmd = [
        *args.mpiexec.split(), "-n", str(args.ranks), sys.executable, "-m", "mpi4py",
        "-m", "distcgan", "compare", "--preset", "digits", "--variants", *args.variants,
        "--seed", str(seed), "--seeds", "1", "--steps", str(args.steps), "--no-real",
        "--data", args.data, "--network", args.network, "--out", str(out), "--no-progress",
        "--resolution", str(args.resolution),
    ]  # fmt: skip
    if name == "augmented":
        cmd += ["--augment", args.augment, "--augment-p", args.augment_p]
    if (out / "compare-config.json").exists():
        cmd.append("--resume")
    print(f"== {name} seed {seed}: {' '.join(cmd)}", flush=True)
    code = subprocess.run(cmd, cwd=REPO).returncode
    if code:  # compare has said why, in its one line
        sys.exit(f"augment_quality.py: {name} seed {seed} failed (exit {code}); see above")
    return {v: json.loads((out / v / "row.json").read_text())["row"] for v in args.variants}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=5, help="run seeds (default 5)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--variants", nargs="+", default=["per-class", "gan", "cgan"])
    p.add_argument("--augment", default="color,translation,cutout")
    p.add_argument("--augment-p", default="1")
    p.add_argument("--steps", type=int, default=900, help="steps per class (the demo's: 900)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mpiexec", default=str(Path(sys.executable).parent / "mpiexec"))
    p.add_argument("--data", default="data/digits16.h5")
    p.add_argument("--network", default="data/digits16_classifier.pt")
    p.add_argument("--resolution", type=int, default=16, help="the data's (16 or 32)")
    p.add_argument("--out", default="runs/augment_quality")
    args = p.parse_args()
    for f in (args.data, args.network):
        if not Path(REPO, f).exists():
            p.error(f"{f} does not exist: run `make demo` once (it makes both), or pass its path")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")

    seeds = range(args.first_seed, args.first_seed + args.seeds)
    rows: dict[str, list[dict]] = {"none": [], "augmented": []}
    for s in seeds:
        rows["none"].append(arm(args, "none", s))
        rows["augmented"].append(arm(args, "augmented", s))

    result: dict = {"seeds": list(seeds), "augment": args.augment, "augment_p": args.augment_p,
                    "steps": args.steps, "data": args.data, "variants": {}}  # fmt: skip
    print(f"\n{len(seeds)} seeds, {args.steps} steps a class, --augment {args.augment} "
          f"--augment-p {args.augment_p} against none, {args.data}")  # fmt: skip
    print(f"{'variant':<10}{'metric':<16}{'none':>9}{'augmented':>11}   augmented - none (95%)")
    for v in args.variants:
        result["variants"][v] = {}
        for m, higher in METRICS.items():
            a = [r[v][m] for r in rows["none"]]
            b = [r[v][m] for r in rows["augmented"]]
            if None in a or None in b:  # a DC-GAN's class accuracy
                continue
            d = paired([float(x) for x in a], [float(x) for x in b])
            half = f" +- {d['half']:.3f}" if d["half"] is not None else ""
            print(f"{v:<10}{m:<16}{sum(a) / len(a):>9.3f}{sum(b) / len(b):>11.3f}   "
                  f"{d['mean']:+.3f}{half}  {verdict(d, higher, ('helps', 'hurts'))}")  # fmt: skip
            result["variants"][v][m] = {"none": a, "augmented": b, "diff": d}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
