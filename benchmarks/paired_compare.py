"""Two comparisons of the same run seeds, one setting changed, as paired differences per seed.

    python benchmarks/paired_compare.py A_DIR B_DIR [--names sync async] [--shares
        [--weights FILE]] [--json]

A_DIR and B_DIR are `distcgan compare --seeds N` directories trained with the same seeds and
budget and one setting apart (e.g. `--schedule sync` and `--schedule async`). An arm whose runs
were split over several comparisons, by seed (`--seed 0 --seeds 3` on one core, `--seed 3 --seeds
2` on another), by variant (`--variants gan`, `--variants cgan`), or both, is given as their
directories joined by commas, DIR1,DIR2: their runs are put together, and a seed of a variant
given twice is an error (a directory that exists is taken whole, even if its name has a comma).
So one table can hold every variant with and without a setting. For each variant both have, and
each metric, it prints A's and B's means over the seeds at which both have it, the paired
difference B - A (each seed's B minus the same seed's A) with its Student-t 95% half-width, and a
verdict: "B better" or "B worse" where that interval excludes 0, "cannot tell" where it holds 0.
Pairing removes what a seed does to both arms, so it can tell differences that the two arms' own
intervals (compare.md) cannot. Above the table it says what each arm trained with (the preset
and the options over it, compare.json's `training`), and in which precision (--amp: each row's,
or for rows before 2026-11-28 what its run directory records, while it is on disk and still
holds that row's run). Two arms in different precisions are compared, with a warning: the
difference is then not the setting's alone. With --json, one JSON line follows the table.

The metrics: IS, FID, the mean per-class FID, precision, recall, class accuracy, and the label
TV: how far the classes the scoring network assigns a variant's samples are from the real
images' classes (total variation; 0 when spread as the data is, 1 - 1/K for a G collapsed onto
one of K equal classes; compare.json's `label_tv`, or computed from its `label_shares`). Rows
scored before 2026-11-28 have neither; with --shares their samples are classified here, on the
CPU, with the comparison's network: the samples.h5 of each seed's run directory, trusted while
its row.json still matches the row (as for the precision), and the network where compare.json
says (a relative path also from the comparison directory; an Inception with --weights FILE where
the comparison was scored with `distcgan compare --weights FILE`). It says how many rows it
classified, and stops where the network is not the one a row was scored with (by the SHA-256
its row.json records).

It says in one line, and exits 2, when a directory has no compare.json (the comparison has not
finished: run it again with --resume), when an arm has a seed of a variant twice, when the two
share no seed of any variant, when any two directories were scored differently (network, samples,
evaluation seed), which would make the difference one of scoring, or when two directories of one
arm trained with different options (compare.json files before 2026-11-27 do not record them: an
arm joining such files with recorded ones is said to, and its recorded ones must agree), or in
different precisions, or with --shares when the comparison's network cannot be loaded or is not
the one its rows were scored with, or two rows were scored with different networks that are one
name or path, or with --weights without --shares, or a --weights FILE that is missing or given for
a comparison not scored with an Inception.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from distcgan.compare.report import training_words
from distcgan.compare.seeds import label_tv, paired, verdict, with_class_mean
from distcgan.run.comparedir import CompareDir

# Each metric, and whether higher is better.
METRICS = {"is_mean": True, "fid": False, "fid_class_mean": False, "precision": True,
           "recall": True, "class_accuracy": True, "label_tv": False}  # fmt: skip
LABELS = {"is_mean": "IS", "fid": "FID", "fid_class_mean": "FID a class (mean)",
          "precision": "precision", "recall": "recall",
          "class_accuracy": "class accuracy", "label_tv": "label TV"}  # fmt: skip


def fail(message: str) -> None:
    """Bad input: one line on stderr, exit 2."""
    print(f"paired_compare.py: {message}", file=sys.stderr)
    sys.exit(2)


def load(d: str) -> dict:
    f = Path(d) / "compare.json"
    if not f.exists():
        fail(f"{f} does not exist: is {d} a finished `distcgan compare`? (run it with --resume)")
    return json.loads(f.read_text())


def scoring(doc: dict) -> dict:
    """How a comparison was scored, less the classifier's own record (its training details)."""
    return {k: v for k, v in doc["scoring"].items() if k != "classifier"}


def same_scoring(da: str, a: dict, db: str, b: dict) -> None:
    if scoring(a) != scoring(b):
        fail(f"{da} and {db} were scored differently ({scoring(a)} against {scoring(b)}): "
             "score both the same way (--network, --n, --eval-seed)")  # fmt: skip


def arm_training(dirs: list[str], docs: list[dict]) -> tuple[dict | None, int]:
    """The training options every directory of one arm that records them (compare.json's
    `training`) records alike, and how many record them: files written before 2026-11-27 do not
    say, and are taken on trust. Two that record different options end the script."""
    recorded = [(d, doc["training"]) for d, doc in zip(dirs, docs, strict=True)
                if doc.get("training") is not None]  # fmt: skip
    for d, t in recorded[1:]:
        if t != recorded[0][1]:
            first, words = recorded[0][0], described(recorded[0][1])
            fail(f"{first} and {d} trained differently ({words} against {described(t)}): "
                 "join only comparisons of one setting in an arm")  # fmt: skip
    return (recorded[0][1] if recorded else None), len(recorded)


def described(training: dict | None, recorded: int = 1, files: int = 1) -> str:
    """compare.json's `training` in words (distcgan.compare.report.training_words), and how
    many of an arm's files record it where not all do."""
    if training is None:
        return "training options not recorded (a compare.json from before 2026-11-27)"
    if recorded < files:
        return (
            f"{training_words(training)} (recorded in {recorded} of its {files} compare.json "
            "files; the rest, from before 2026-11-27, taken on trust)"
        )
    return training_words(training)


def precision(d: str, doc: dict, seed: str, v: str) -> str | None:
    """The precision (--amp) a run of comparison `d` trained in: its row's (compare.json rows
    say since 2026-11-28), or else its run directory's record (RunDir.precisions), while that
    directory is on disk and still holds the run the row was made from; None where neither
    says."""
    row = doc["runs"][seed][v]
    if row.get("amp"):
        return str(row["amp"])
    rd = CompareDir(Path(d)).variant(int(seed), int(doc["seeds"][0]), v)
    try:
        stored = json.loads(rd.row.read_text())["row"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if stored.get("fid") != row.get("fid"):  # retrained since: not this row's run
        return None
    return rd.precisions() or None


def arm_precision(
    dirs: list[str], docs: list[dict], variants: list[str]
) -> tuple[str | None, int, int]:
    """The one precision every run of an arm's variants (those its table compares) that says
    trained in, how many say, of how many runs. Two that differ end the script: an arm's
    seeds must differ by the seed alone."""
    known: list[tuple[str, str, str]] = []
    runs = 0
    for d, doc in zip(dirs, docs, strict=True):
        for seed in doc["runs"]:
            for v in (v for v in variants if v in doc["runs"][seed]):
                runs += 1
                if (amp := precision(d, doc, seed, v)) is not None:
                    known.append((d, f"{d} (seed {seed}, {v})", amp))
    for d, where, amp in known[1:]:
        d0, first, amp0 = known[0]
        if amp != amp0:
            fix = "join only runs of one precision in an arm"
            if d == d0:
                fix = "that comparison mixes precisions: train its runs again in one --amp"
            fail(f"{first} and {where} trained in different precisions (--amp {amp0} against "
                 f"{amp}): {fix}")  # fmt: skip
    return (known[0][2] if known else None), len(known), runs


def precision_words(arm: dict) -> str:
    amp, known, runs = arm["amp"], arm["amp_known"], arm["amp_runs"]
    if amp is None:
        return "precision not recorded"
    return f"--amp {amp}" + (f" (known for {known} of its {runs} runs)" if known < runs else "")


def load_arm(spec: str) -> dict:
    """One arm: a compare directory, or several joined by commas, their runs put together by
    seed and variant ({"seeds": every seed of any of its variants, "variants": every variant of
    any of its directories, in the order first seen, "runs": {seed: {variant: row}} for the
    runs it has, "scoring", "training", "recorded", "files": how many of its directories
    record `training`, of how many; "amp", "amp_known", "amp_runs": its precision, how many of
    its runs say it, of how many (arm_precision); "where": each (seed, variant)'s directory
    and document; "counts": the real images of each compared class, by class id, or None where
    neither compare.json nor its data file says}). So an arm may join comparisons split by
    seed (`--seed 0 --seeds 3` and `--seed 3 --seeds 2`) or by variant (`--variants gan` and
    `--variants cgan`, the same seeds), or both; a seed of a variant given twice is an error.
    An existing directory is one directory, commas in its name included."""
    dirs = [spec] if Path(spec).is_dir() else spec.split(",")
    if "" in dirs:
        fail(f"{spec!r} has an empty directory name: join an arm's directories with single "
             "commas, DIR1,DIR2, with none at either end")  # fmt: skip
    docs = [load(d) for d in dirs]
    arm = {"seeds": [], "variants": [], "runs": {}, "scoring": docs[0]["scoring"],
           "files": len(docs), "where": {}}  # fmt: skip
    arm["training"], arm["recorded"] = arm_training(dirs, docs)
    for d, doc in zip(dirs, docs, strict=True):
        same_scoring(dirs[0], docs[0], d, doc)
        for s in doc["seeds"]:
            for v in doc["variants"]:
                if (str(s), v) in arm["where"]:
                    first = arm["where"][str(s), v][0]
                    fail(f"seed {s} of {v} is in both {first} and {d}: give each seed of a "
                         "variant once in an arm")  # fmt: skip
                arm["where"][str(s), v] = (d, doc)
                arm["runs"].setdefault(str(s), {})[v] = doc["runs"][str(s)][v]
                if v not in arm["variants"]:
                    arm["variants"].append(v)
            if s not in arm["seeds"]:
                arm["seeds"].append(s)
    arm["amp"], arm["amp_known"], arm["amp_runs"] = arm_precision(dirs, docs, arm["variants"])
    arm["counts"] = real_counts(docs[0])
    return arm


def real_counts(doc: dict) -> dict[str, int] | None:
    """The real images of each compared class, by class id: compare.json's `counts` (since
    2026-11-28), else its data file's, while it is on disk."""
    if doc.get("counts"):
        return {str(k): n for k, n in zip(doc["classes"], doc["counts"], strict=True)}
    from distcgan.data import read_info

    try:
        info = read_info(doc["data"])
        return {str(k): info.counts[k] for k in doc["classes"]}
    except Exception:  # gone, moved, not readable, or another file: no label TV for old rows
        return None


def value(row: dict, metric: str, counts: dict[str, int]) -> float | None:
    """A row's metric; the mean per-class FID from its `per_class_fid` where the row is older
    than the column (compare.json before 2026-11-27); the label TV from its `label_shares`
    and the real images' `counts` where it has the shares and not the TV."""
    if metric == "label_tv" and row.get("label_tv") is None:
        return label_tv(row.get("label_shares"), counts)
    return with_class_mean(row).get(metric)


def run_samples(d: str, doc: dict, seed: str, v: str) -> tuple[Path | None, str | None]:
    """The samples.h5 of comparison `d`'s run of `v` at `seed`, while its row.json still holds
    the row compare.json has (a run trained again since is not this row's), else None; and the
    SHA-256 of the network its row.json says the row was scored with, None where it does not."""
    row = doc["runs"][seed][v]
    rd = CompareDir(Path(d)).variant(int(seed), int(doc["seeds"][0]), v)
    try:
        stored = json.loads(rd.row.read_text())
        held = stored["row"].get("fid") == row.get("fid")
        sha = (stored.get("fingerprint") or {}).get("network_sha256")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, None
    return (rd.samples if held and rd.samples.is_file() else None), sha


def classify_shares(
    arm: dict,
    seeds: list,
    variants: list,
    *,
    weights: str | None,
    scored: dict[str, tuple[str, str]],
) -> tuple[int, int]:
    """--shares: the label shares of the arm's rows (of `seeds` and `variants`) scored before
    they were kept (no `label_shares` key), from their run's samples.h5 and the comparison's
    network (an Inception with `weights`, --weights, where given), on the CPU; (rows
    classified, rows that needed it). A network that is not the one the row was scored with
    (by the SHA-256 its row.json records) ends the script: its labels would not be the row's;
    so do two rows scored with different networks at one place (`scored`, shared by the
    arms: {network: the first row's (where, SHA-256)}), which no one file can classify."""
    import numpy as np

    from distcgan.compare.report import labeller
    from distcgan.data import load_class, read_info
    from distcgan.errors import UserError
    from distcgan.eval.metrics.networks import WEIGHT_FILES, load_network

    nets: dict = {}
    done = wanted = 0
    for seed in map(str, seeds):
        for v in variants:
            if (seed, v) not in arm["where"]:
                continue
            d, doc = arm["where"][seed, v]
            row = arm["runs"][seed][v]
            if "label_shares" in row:  # kept (None: the network's outputs are not the classes)
                continue
            wanted += 1
            samples, scored_sha = run_samples(d, doc, seed, v)
            try:
                info = read_info(str(samples)) if samples is not None else None
            except UserError:  # a damaged file: not classified, said in the count
                info = None
            if samples is None or info is None:
                continue
            network = arm["scoring"]["network"]
            if network not in WEIGHT_FILES and not Path(network).is_file():
                network = str(Path(d) / network)  # a relative path, from the comparison's
            key = (network, info.channels, info.resolution)
            where = f"{d} (seed {seed}, {v})"
            try:
                if key not in nets:
                    shape = (info.channels, info.resolution)
                    nets[key] = load_network(network, weights, "cpu", *shape)
            except UserError as exc:
                fail(f"--shares: {exc}")
            net, counts = nets[key], np.zeros(info.num_classes)
            if net.num_outputs != info.num_classes:
                row["label_shares"] = None  # the outputs are not the classes: no shares
                continue
            if scored_sha:  # rows scored with different weights at one place: no one fits both
                first = scored.setdefault(network, (where, scored_sha))
                if first[1] != scored_sha:
                    fail(f"--shares: {first[0]} and {where} were scored with different networks "
                         f"(SHA-256 beginning {first[1][:16]} and {scored_sha[:16]}) that are "
                         f"both {network}: compare only comparisons scored with one "
                         "network")  # fmt: skip
            if scored_sha and scored_sha != net.sha256:
                fix = ("give the weights it was scored with as --weights FILE"
                       if network in WEIGHT_FILES else
                       f"put the classifier it was scored with back at {network}")  # fmt: skip
                fail(f"--shares: {where} was scored with a network whose SHA-256 begins "
                     f"{scored_sha[:16]}, and {net.path} is {net.sha256[:16]}: {fix}")  # fmt: skip
            predict = labeller(net)
            for k, n in enumerate(info.counts):
                if n:
                    labels = predict(load_class(str(samples), k))
                    counts += np.bincount(labels, minlength=len(counts))
            if counts.sum() > 0:
                row["label_shares"] = {str(k): c / counts.sum() for k, c in enumerate(counts)}
                done += 1
    return done, wanted


def shared(a: dict, b: dict) -> dict[str, list]:
    """{variant: the seeds both arms have a run of it at, in A's order}, for each variant
    both arms have at one seed at least, in A's order."""
    out: dict[str, list] = {}
    for v in a["variants"]:
        seeds = [s for s in a["seeds"] if v in a["runs"].get(str(s), {})
                 and v in b["runs"].get(str(s), {})]  # fmt: skip
        if seeds:
            out[v] = seeds
    return out


def table(a: dict, b: dict, names: tuple[str, str]) -> dict:
    """{"seeds": every seed compared, "seeds_by_variant": {variant: its seeds}, "variants":
    {variant: {metric: {"a": [...], "b": [...], "diff": paired(...), "verdict": str}}}}, each
    variant over the seeds at which both comparisons have it."""
    by_variant = shared(a, b)
    words = (f"{names[1]} better", f"{names[1]} worse")
    out: dict = {}
    for v, seeds in by_variant.items():
        out[v] = {}
        for m, higher in METRICS.items():
            xa = [value(a["runs"][str(s)][v], m, a["counts"]) for s in seeds]
            xb = [value(b["runs"][str(s)][v], m, b["counts"]) for s in seeds]
            if None in xa or None in xb:  # a DC-GAN's class accuracy and per-class FID
                continue
            d = paired([float(x) for x in xa], [float(x) for x in xb])
            out[v][m] = {"a": xa, "b": xb, "diff": d, "verdict": verdict(d, higher, words)}
    seeds = [s for s in a["seeds"] if any(s in ss for ss in by_variant.values())]
    return {"seeds": seeds, "seeds_by_variant": by_variant, "variants": out}


def seeds_words(t: dict) -> str:
    """How many seeds, and which: one list where every variant has the same, else each
    variant's."""

    def listed(seeds: list) -> str:
        return f"{len(seeds)} seed{'s' * (len(seeds) != 1)} ({', '.join(map(str, seeds))})"

    lists = list(t["seeds_by_variant"].values())
    if all(ss == lists[0] for ss in lists):
        return listed(lists[0])
    return "; ".join(f"{v}: {listed(ss)}" for v, ss in t["seeds_by_variant"].items())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "a",
        metavar="A_DIR",
        help="the comparison taken as the baseline (DIR1,DIR2,...: split seeds)",
    )
    p.add_argument(
        "b", metavar="B_DIR", help="the comparison with the one setting changed (DIR1,DIR2,...)"
    )
    p.add_argument("--names", nargs=2, default=["A", "B"], metavar=("A", "B"),
                   help="what to call the two arms in the table (e.g. sync async)")  # fmt: skip
    p.add_argument("--shares", action="store_true",
                   help="rows without label shares (scored before 2026-11-28): classify their "
                   "samples.h5 with the comparison's network, on the CPU (slow)")  # fmt: skip
    p.add_argument("--weights", metavar="FILE",
                   help="with --shares, for a comparison scored with inception-v3 or "
                   "inception-v3-tf and `distcgan compare --weights FILE`: that FILE")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON line after the table")
    args = p.parse_args()
    if args.weights and not args.shares:
        fail("--weights goes with --shares (the network that classifies older rows' samples): "
             "add --shares, or drop --weights")  # fmt: skip
    a, b = load_arm(args.a), load_arm(args.b)
    same_scoring(args.a, a, args.b, b)
    if args.weights:
        from distcgan.eval.metrics.networks import WEIGHT_FILES

        if (network := a["scoring"]["network"]) not in WEIGHT_FILES:
            fail(f"--weights is for a comparison scored with {' or '.join(WEIGHT_FILES)}, and "
                 f"{args.a} was scored with {network}, which holds its own weights: drop "
                 "--weights")  # fmt: skip
        if not Path(args.weights).is_file():
            fail(f"--weights {args.weights}: no such file; give the file `distcgan compare "
                 "--weights` scored with")  # fmt: skip
    if not shared(a, b):
        fail(f"{args.a} and {args.b} share no seed of any variant (seeds {a['seeds']} and "
             f"{b['seeds']}, variants {', '.join(a['variants'])} and "
             f"{', '.join(b['variants'])}): train the same ones")  # fmt: skip
    classified = None
    if args.shares:
        seeds = [s for s in a["seeds"] if s in b["seeds"]]
        variants = [v for v in a["variants"] if v in b["variants"]]
        scored: dict[str, tuple[str, str]] = {}
        classified = [classify_shares(arm, seeds, variants, weights=args.weights, scored=scored)
                      for arm in (a, b)]  # fmt: skip
    t = table(a, b, tuple(args.names))
    na, nb = args.names
    print(
        f"{seeds_words(t)}: {na} = {args.a}, "
        f"{nb} = {args.b}; {nb} - {na} per seed, mean and Student-t 95% half-width"
    )
    print(f"{na}: {described(a['training'], a['recorded'], a['files'])}; "
          f"{nb}: {described(b['training'], b['recorded'], b['files'])}")  # fmt: skip
    differ = a["amp"] is not None and b["amp"] is not None and a["amp"] != b["amp"]
    print(f"{na}: {precision_words(a)}; {nb}: {precision_words(b)}"
          + ("; the arms differ in precision too: the difference is not the setting's alone"
             if differ else ""))  # fmt: skip
    if classified:
        print("--shares: classified " + "; ".join(
            f"{n}: {done} of the {wanted} rows without label shares"
            for n, (done, wanted) in zip(args.names, classified, strict=True)))  # fmt: skip
    print(f"| variant | metric | {na} | {nb} | {nb} - {na} (95%) | |")
    print("|---|---|---|---|---|---|")
    for v, rows in t["variants"].items():
        for m, r in rows.items():
            d = r["diff"]
            half = f" +- {d['half']:.3f}" if d["half"] is not None else ""
            mean_a, mean_b = sum(r["a"]) / len(r["a"]), sum(r["b"]) / len(r["b"])
            print(f"| {v} | {LABELS[m]} | {mean_a:.3f} | {mean_b:.3f} | "
                  f"{d['mean']:+.3f}{half} | {r['verdict']} |")  # fmt: skip
    if args.json:
        training = [a["training"], b["training"]]
        # how many of each arm's compare.json files record `training`, of how many
        recorded = [[a["recorded"], a["files"]], [b["recorded"], b["files"]]]
        print(json.dumps({"a": args.a, "b": args.b, "names": args.names, "training": training,
                          "recorded": recorded, "amp": [a["amp"], b["amp"]], **t}))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
