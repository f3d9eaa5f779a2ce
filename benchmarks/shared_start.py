"""The shared start's measurements (issue 81): each table of docs/studies/shared-start.md made by
one `distcgan compare` per cell, then summed up from the comparisons' compare.json.

    python benchmarks/shared_start.py TABLE --out DIR [--seeds 5] [--first-seed 0] [--ranks 2]
        [--threads 1] [--dry-run]
    python benchmarks/shared_start.py table DIR... [--json FILE]  # one cell's table again, its
        # seeds from every DIR (e.g. two processes' halves); --json: its means and intervals

TABLE is one of:
  seeds16, seeds16-3x, seeds32, seeds32-3x   per-class, the DC-CGAN and the shared start at the
                                             demo's budget (900 steps a class) and at 3x
  fraction   the shared start at 16 px with --shared-fraction 0.25, 0.5, 0.75
  freeze     the shared start at 16 px with --freeze-d 0, 1, 2
  longtail   the three variants on the long-tailed digits (data_prep --long-tail 10) at batch
             16 (its smallest class has 17 images): the mean FID a class of the three smallest
             classes, against their training images and against the whole digits' (each
             variant's samples scored again by `distcgan evaluate --samples`); longtail32: at 32 px
  curves     the three at 16 px with --score-every 100 (learning curves at equal images seen)

Each cell is a comparison directory DIR/<cell>/ (`compare --resume` continues it: run the same
command again after a stop). The data files and the digits classifier (the scoring network of
every cell, trained once by `distcgan classifier train` on the whole digits at the cell's
resolution, the long-tailed cell's too) are made under DIR/data/ when missing.
`--network FILE` scores with a kept network instead (a record's, so that seeds added later are
scored as the first were: the classifier's weights differ with the CPU and thread count), and
`--variants V...` trains only those of a cell's variants (a table's missing rows).
Printed at the end: a Markdown table per cell (mean [95% interval] over the seeds of IS, FID,
precision, recall, class accuracy, FID a class, train s, the three smallest classes' FID), where a
cell has both, the shared start minus per-class from scratch paired by seed, and one JSON line
per cell.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from distcgan.compare.seeds import interval, paired, verdict  # noqa: E402 - after the path is set

DEMO_STEPS = 900  # the demo's budget a class (make demo)
WHOLE = "evaluate-whole-digits.json"  # a long-tailed run's samples against the whole digits
FROM_SCRATCH, SHARED = "per-class", "shared-per-class"
THREE = (FROM_SCRATCH, "cgan", SHARED)
HIGHER_IS_BETTER = {"is_mean": True, "fid": False, "precision": True, "recall": True,
                    "class_accuracy": True, "fid_class_mean": False}  # fmt: skip
METRICS = (
    ("is_mean", "IS"),
    ("fid", "FID"),
    ("precision", "precision"),
    ("recall", "recall"),
    ("class_accuracy", "class accuracy"),
    ("fid_class_mean", "FID a class"),
    ("train_s", "train s"),
)


def cells(table: str) -> list[tuple[str, int, int, list[str]]]:
    """(cell name, resolution, steps a class, compare's extra flags) of each cell of `table`."""
    variants = ["--variants", *THREE]
    if table.startswith("seeds"):
        res = 32 if "32" in table else 16
        steps = 3 * DEMO_STEPS if table.endswith("-3x") else DEMO_STEPS
        return [(table, res, steps, variants)]
    if table == "fraction":
        return [
            (f"fraction-{f}", 16, DEMO_STEPS, ["--variants", "shared-per-class",
                                               "--shared-fraction", f])
            for f in ("0.25", "0.5", "0.75")
        ]  # fmt: skip
    if table == "freeze":
        return [
            (f"freeze-{n}", 16, DEMO_STEPS, ["--variants", "shared-per-class", "--freeze-d", n])
            for n in ("0", "1", "2")
        ]
    if table in ("longtail", "longtail32"):  # a class's batch draws no more than it has
        return [(table, 32 if table.endswith("32") else 16, DEMO_STEPS,
                 [*variants, "--batch-size", "16"])]  # fmt: skip
    if table == "curves":
        return [("curves", 16, DEMO_STEPS, [*variants, "--score-every", "100"])]
    raise SystemExit(f"shared_start.py: unknown table {table!r}: see --help")


def with_variants(flags: list[str], variants: list[str]) -> list[str]:
    """compare's flags with the values of `--variants` replaced by `variants`."""
    at = flags.index("--variants") + 1
    end = next((i for i in range(at, len(flags)) if flags[i].startswith("--")), len(flags))
    return [*flags[:at], *variants, *flags[end:]]


def run(cmd: list[str], dry: bool) -> None:
    print("$ " + shlex.join(cmd), flush=True)
    if not dry:
        subprocess.run(cmd, check=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def data_files(
    out: Path, res: int, long_tail: bool, dry: bool, network: Path | None = None
) -> tuple[Path, Path]:
    """The digits at `res` px (long-tailed where asked) and the classifier that scores them
    (`network` where given, else one trained on the whole digits when missing)."""
    data = out / "data" / f"digits{res}{'-longtail' if long_tail else ''}.h5"
    py = sys.executable
    if not data.exists():
        extra = ["--long-tail", "10"] if long_tail else []
        run([py, "-m", "data_prep", "digits", "--resolution", str(res), "--out", str(data),
             *extra], dry)  # fmt: skip
    if long_tail:  # scored by the classifier of the whole digits: its smallest classes too
        return data, data_files(out, res, False, dry, network)[1]
    if network is not None and not network.is_file():
        raise SystemExit(f"shared_start.py: --network {network}: no such file (give a kept "
                         "classifier's .pt, or leave --network out to train one)")  # fmt: skip
    net = network or data.with_name(data.stem + "_classifier.pt")
    if not net.exists():
        run([py, "-m", "distcgan", "classifier", "train", str(data), "--out", str(net),
             "--no-progress"], dry)  # fmt: skip
    return data, net


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("table")
    p.add_argument("dirs", nargs="*", type=Path, help="with `table`: the cells to print")
    p.add_argument("--out", type=Path)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument(
        "--first-seed", type=int, default=0, help="the first run seed (two processes: 0 and 3)"
    )
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument(
        "--json", type=Path, help="with `table`: also write its means and intervals here"
    )
    p.add_argument("--network", type=Path, help="score with this classifier (no training one)")
    p.add_argument("--variants", nargs="+", help="train only these of each cell's variants")
    args = p.parse_args(argv)
    if args.network is not None:  # compare runs from the repository: a path from here, absolute
        args.network = args.network.resolve()
    if args.table == "table":
        summary = print_cell(*args.dirs)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=1) + "\n")
        return 0
    if args.out is None:
        p.error("--out DIR is needed")
    mpiexec = str(Path(sys.executable).with_name("mpiexec"))
    for name, res, steps, extra in cells(args.table):
        long_tail = args.table.startswith("longtail")
        data, net = data_files(args.out, res, long_tail, args.dry_run, args.network)
        if args.variants:
            extra = with_variants(extra, args.variants)
        cell = args.out / (f"{name}-from{args.first_seed}" if args.first_seed else name)
        cmd = [mpiexec, "-n", str(args.ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan",
               "compare", "--preset", "digits", "--data", str(data), "--resolution", str(res),
               "--steps", str(steps), "--seed", str(args.first_seed), "--seeds",
               str(args.seeds), "--threads",
               str(args.threads), "--no-real", "--network", str(net), "--no-progress",
               "--out", str(cell), *extra]  # fmt: skip
        if (cell / "compare-config.json").exists():
            cmd.append("--resume")
        run(cmd, args.dry_run)
        if long_tail:
            whole = data.with_name(f"digits{res}.h5")  # data_files made it for the classifier
            judge(cell, whole, net, args.dry_run)
        if not args.dry_run:
            print_cell(cell)
    return 0


def judge(cell: Path, whole: Path, net: Path, dry: bool) -> None:
    """Every run's samples of the long-tailed cell scored again against the whole digits: a
    small class's FID against its 17 training images favours a G that copies them; against the
    class's 174-183 images of the whole digits it says how well G draws the class."""
    if dry:
        print(f"$ (each run of {cell}: distcgan evaluate --samples RUN/samples.h5 --data {whole} "
              f"--network {net} --json RUN/{WHOLE})")  # fmt: skip
        return
    report = json.loads((cell / "compare.json").read_text())
    for rows in report["runs"].values():
        for row in rows.values():
            out = Path(row["run"]) / WHOLE
            if not out.exists():
                run([sys.executable, "-m", "distcgan", "evaluate", "--samples", row["samples"],
                     "--data", str(whole), "--network", str(net), "--json", str(out),
                     "--no-progress"], dry)  # fmt: skip


def print_cell(*cells: Path) -> dict:
    """One cell's table (mean [95% interval] over its seeds, those of every comparison
    directory given: one cell's seeds run as two processes, or a seed's variants as separate
    comparisons) and one JSON line."""
    reports = [json.loads((c / "compare.json").read_text()) for c in cells]
    report = reports[0]
    runs: dict[str, dict] = {}  # seed -> variant -> row, a seed's variants from any DIR
    for r in reports:
        for seed, rows in r["runs"].items():
            runs.setdefault(seed, {}).update(rows)
    runs = dict(sorted(runs.items(), key=lambda kv: int(kv[0])))  # lists in seed order
    names = sorted({v for rows in runs.values() for v in rows})
    cell = cells[0]
    steps = report["budget"]["steps_per_class"]
    seeds = ", ".join(runs)
    print(f"\n{cell.name}: {len(runs)} seed(s) ({seeds}), {steps} steps a class")
    print("| variant | " + " | ".join(label for _, label in METRICS)
          + " | smallest 3 FID | smallest 3 FID, whole digits |")  # fmt: skip
    print("|---" * (len(METRICS) + 3) + "|")
    line: dict = {"cell": cell.name, "seeds": list(runs)}
    summary: dict = {"seeds": list(runs), "variants": {}}
    for v in names:
        rows = [rows[v] for rows in runs.values() if v in rows]
        cells_ = []
        for key, _ in METRICS:
            values = [r[key] for r in rows if r.get(key) is not None]
            cells_.append(_fmt(values))
            line[f"{v}:{key}"] = values
            summary["variants"].setdefault(v, {})[key] = interval(values) if values else None
        smallest = _smallest(report, [r.get("per_class_fid") for r in rows])
        whole = _smallest(report, [_whole(r) for r in rows])
        line[f"{v}:smallest3_fid"], line[f"{v}:smallest3_fid_whole"] = smallest, whole
        for key, values in (("smallest3_fid", smallest), ("smallest3_fid_whole", whole)):
            summary["variants"][v][key] = interval(values) if values else None
        summary["variants"][v]["seeds"] = [s for s, rows_ in runs.items() if v in rows_]
        print(f"| {v} | " + " | ".join(cells_) + f" | {_fmt(smallest)} | {_fmt(whole)} |")
    if {FROM_SCRATCH, SHARED} <= set(names):
        summary["paired"] = print_paired(runs)
    print(json.dumps(line))
    return summary


def print_paired(runs: dict[str, dict]) -> dict:
    """The shared start minus per-class from scratch, seed by seed, over the seeds that have both:
    the mean difference of each metric, its Student-t 95% half-width and the verdict."""
    both = [rows for rows in runs.values() if FROM_SCRATCH in rows and SHARED in rows]
    print(f"\npaired by seed ({len(both)} seed(s) with both): {SHARED} - {FROM_SCRATCH}")
    print("| metric | difference | 95% half-width | verdict |\n|---|---|---|---|")
    out = {}
    for key, label in METRICS:
        if key not in HIGHER_IS_BETTER:
            continue
        a = [rows[FROM_SCRATCH].get(key) for rows in both]
        b = [rows[SHARED].get(key) for rows in both]
        if not both or None in a or None in b:
            continue
        d = paired(a, b)
        d["verdict"] = verdict(d, HIGHER_IS_BETTER[key], ("shared better", "shared worse"))
        half = "n/a" if d["half"] is None else f"{d['half']:.3f}"
        print(f"| {label} | {d['mean']:+.3f} | {half} | {d['verdict']} |")
        out[key] = d
    return out


def _smallest(report: dict, per_class: list[dict | None]) -> list[float]:
    """Per seed, the mean FID a class (per_class: each seed's {class: FID}) of the three
    smallest classes of the data the comparison trained on."""
    counts = dict(zip(report["classes"], report.get("counts") or []))  # older files: none
    small = sorted(counts, key=lambda k: (counts[k], k))[:3]
    out: list[float] = []
    if not small:
        return out
    for per in per_class:
        if per and all(str(k) in per for k in small):
            out.append(sum(per[str(k)] for k in small) / len(small))
    return out


def _whole(row: dict) -> dict | None:
    """A row's FID a class against the whole digits (judge's file in its run), if scored."""
    path = Path(row["run"]) / WHOLE if row.get("run") else None
    return json.loads(path.read_text())["per_class_fid"] if path and path.exists() else None


def _fmt(values: list[float]) -> str:
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    i = interval(values)
    assert i is not None  # every value is a number
    return f"{i['mean']:.3f} [{i['lo']:.3f}, {i['hi']:.3f}]"


if __name__ == "__main__":
    sys.exit(main())
