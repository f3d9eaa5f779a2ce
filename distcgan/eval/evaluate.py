"""`distcgan evaluate`: Inception Score, FID, per-class FID and classifier accuracy, over ranks.

Every rank scores the samples of its own classes (read from a sample file, or generated on the
fly from a run's checkpoints) and keeps, per split, the sums of the Inception Score and, per
class, the feature sums of FID. What crosses the network: one reduction of the per-split sums
(splits x (num_outputs + 2) numbers), one of the fake feature sums (1 + D + D^2 numbers), and a
gather of a few numbers per class. Never an image, never a per-sample vector.

Samples are numbered in the class-sorted layout of a sample file (class k holds rows
offsets[k]:offsets[k+1]); sample i goes to split `scores.split_assignment(n, splits, seed)[i]`,
a seeded random permutation, so the splits do not depend on the number of ranks and each holds
every class. With --run, class k's samples are exactly those `distcgan sample --run RUN --seed
SEED --per-class n_k` writes (n_k = n / K, the first n % K classes one more).
Unlabelled samples (a gan run, or its sample file) get the Inception Score and the FID against
every scored class's real images; class accuracy and per-class FID need labels and are none.

Precision and recall (precision_recall.py, k = 3) need feature vectors, not sums. Per class they
are computed on the class's rank from its fake features and those of at most PR_REAL_PER_CLASS of
its real images (a seeded subset). Overall, every rank sends rank 0 a share of its classes' fake
and real features, in proportion to the classes' counts, about PR_MAX of each in all: with
Inception's 2,048 float32 features that is 2 x 10,000 x 8 KiB = 164 MB gathered on rank 0 (the
same at 10 or 1,000 classes), plus blocks of 1,024 x 10,000 float64 distances (82 MB).
Leaves out: the networks (networks.py), the cached real statistics (realstats.py), the math
(scores.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distcgan.data import DatasetInfo, is_unlabelled, load_class, read_info
from distcgan.errors import ClassFailure, UserError
from distcgan.eval.networks import Network, load_network
from distcgan.eval.precision_recall import K as PR_K
from distcgan.eval.precision_recall import precision_recall, proportional_take
from distcgan.eval.realstats import (
    DeviceSums,
    RealStats,
    batches,
    ensure_real_stats,
    read_class,
    read_real,
)
from distcgan.eval.scores import (
    FeatureSums,
    ISSums,
    frechet_from_sqrt,
    inception_score,
    split_assignment,
)
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context, format_table
from distcgan.plan import class_seed

DEFAULT_N = 50_000
PR_MAX = 10_000  # fake (and real) feature rows of the overall precision/recall, about
PR_REAL_PER_CLASS = 1_000  # real images of a class whose features precision/recall use, at most


@dataclass(frozen=True)
class EvalOptions:
    """The command line of `distcgan evaluate`."""

    run: str | None = None
    samples: str | None = None
    data: str | None = None
    network: str = "inception-v3"
    weights: str | None = None
    n: int | None = None  # --run only; default DEFAULT_N
    classes: tuple[int, ...] | None = None  # --samples only: score just these classes
    splits: int = 10
    seed: int = 0
    json: str | None = None
    devices: str = "auto"
    batch_size: int = 100
    progress: bool = True  # a bar of rank 0's scored images (distcgan/progress.py)


@dataclass(frozen=True)
class Source:
    """What is scored, the same on every rank: a sample file, or a run to sample from."""

    kind: str  # "samples" or "run"
    path: str
    class_names: tuple[str, ...]
    counts: tuple[int, ...]  # samples per class (0: a class not scored)
    resolution: int
    channels: int
    data: str | None  # the real data file for FID, if any
    z_dim: int = 0
    run_seed: int = 0
    steps: int = 0
    labelled: bool = True  # False: an unconditional G's draws, whose rows have no class

    @property
    def n(self) -> int:
        return sum(self.counts)

    @property
    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)


def resolve_source(opts: EvalOptions) -> Source:
    """Rank 0: check the options and read what is to be scored (no images)."""
    if opts.splits < 1 or opts.batch_size < 1:
        raise UserError(
            f"--splits and --batch-size must be >= 1, got {opts.splits}, {opts.batch_size}"
        )
    if opts.samples:
        if opts.n is not None:
            raise UserError(
                "--n applies to --run; --samples scores every image of the sample file: drop --n "
                "(or write a smaller file with distcgan sample --per-class)"
            )
        info = read_info(opts.samples)
        counts = info.counts
        if opts.classes is not None:
            for k in opts.classes:
                if not 0 <= k < info.num_classes or counts[k] == 0:
                    raise UserError(f"{opts.samples} has no images of class {k} to score")
            counts = tuple(c if k in opts.classes else 0 for k, c in enumerate(counts))
        src = Source(
            "samples",
            opts.samples,
            info.class_names,
            counts,
            info.resolution,
            info.channels,
            opts.data,
            labelled=not is_unlabelled(opts.samples),
        )
    else:
        from distcgan.run.rundir import RunDir

        if opts.classes is not None:
            raise UserError("classes applies to --samples; a run is scored on its own classes")
        run = Path(opts.run or "")
        cfg = RunDir(run).read_config()
        dataset = RunDir(run).read_dataset()
        names = tuple(dataset["class_names"])
        classes = cfg.classes or tuple(range(len(names)))
        n = DEFAULT_N if opts.n is None else opts.n
        if n < len(classes):
            raise UserError(
                f"--n {n} is fewer than the run's {len(classes)} classes: pass --n "
                f">= {len(classes)}"
            )
        base, extra = divmod(n, len(classes))
        counts = [0] * len(names)
        for i, k in enumerate(classes):
            counts[k] = base + (1 if i < extra else 0)
        data = opts.data or cfg.data or None
        if data and not opts.data and not Path(data).is_file():
            raise UserError(
                f"the run's data file {data} is missing: pass --data REAL.h5 for FID (the data "
                "file the run trained on)"
            )
        src = Source(
            "run",
            str(run),
            names,
            tuple(counts),
            cfg.resolution,
            int(dataset["channels"]),
            data,
            cfg.z_dim,
            cfg.seed,
            cfg.steps,
            labelled=cfg.mode != "gan",
        )
    if src.n < opts.splits:
        raise UserError(f"--splits {opts.splits} is more than the {src.n} samples: lower --splits")
    if opts.json and not Path(opts.json).parent.is_dir():
        raise UserError(f"--json {opts.json}: folder {Path(opts.json).parent} does not exist")
    return src


def check_real(src: Source) -> DatasetInfo:
    """Rank 0: the real data file must hold the samples' classes at their resolution."""
    assert src.data is not None
    info = read_info(src.data)
    if info.class_names != src.class_names:
        raise UserError(
            f"data file {src.data} has classes {list(info.class_names)[:4]}... but the samples "
            f"have {list(src.class_names)[:4]}...: pass the data file the run trained on (--data)"
        )
    if (info.resolution, info.channels) != (src.resolution, src.channels):
        raise UserError(
            f"data file {src.data} holds {info.resolution} px images with {info.channels} "
            f"channel(s), the samples {src.resolution} px with {src.channels}: pass the data file "
            "the run trained on (--data)"
        )
    return info


def check_classes(net: Network, src: Source) -> None:
    names = net.metadata.get("class_names")
    if names is not None and tuple(names) != src.class_names:
        raise UserError(
            f"classifier {net.path} was trained on classes {names[:4]}... but the samples have "
            f"{list(src.class_names)[:4]}...: train one on the samples' data file"
        )


def _images(src: Source, k: int, gens: dict[int, Any], seed: int, device: str) -> np.ndarray:
    if src.kind == "samples":
        return load_class(src.path, k)
    from distcgan.eval.sample import generate

    sample_seed = class_seed(src.run_seed + seed, k, "sample")  # as `distcgan sample --seed`
    return generate(gens[k], src.counts[k], src.z_dim, sample_seed, device)


def score_class(
    net: Network,
    images: np.ndarray,
    split_of: np.ndarray,
    is_sums: ISSums,
    batch_size: int,
    bar: Any = None,
) -> tuple[FeatureSums, np.ndarray, torch.Tensor]:
    """Add one class's samples to `is_sums`; return their feature sums, predicted labels and
    features (on the network's device, for precision/recall)."""
    sums = DeviceSums(net.feature_dim, net.device)
    predicted, feats = [], []
    for lo, batch in zip(range(0, len(images), batch_size), batches(images, batch_size)):
        logits, features = net(batch)
        probs = torch.softmax(logits.double(), dim=1)
        is_sums.add(probs.cpu().numpy(), split_of[lo : lo + len(batch)])
        sums.add(features)
        predicted.append(logits.argmax(1).cpu().numpy())
        feats.append(features)
        if bar is not None:
            bar.update(len(batch))
    return sums.result(), np.concatenate(predicted), torch.cat(feats)


def real_features(net: Network, data: str, k: int, seed: int, batch_size: int) -> torch.Tensor:
    """Features of class k's real images, at most PR_REAL_PER_CLASS of them (a seeded subset)."""
    images = load_class(data, k)
    if len(images) > PR_REAL_PER_CLASS:
        gen = torch.Generator().manual_seed(class_seed(seed, k, "pr-real"))
        pick = torch.randperm(len(images), generator=gen)[:PR_REAL_PER_CLASS].sort().values
        images = images[pick.numpy()]
    return torch.cat([net(b)[1] for b in batches(images, batch_size)])


def _pr(real: torch.Tensor, fake: torch.Tensor, device: str) -> tuple[float | None, float | None]:
    """(precision, recall), or (None, None) when a set has k rows or fewer."""
    if len(real) <= PR_K or len(fake) <= PR_K:
        return None, None
    return precision_recall(real, fake, device=device)


def _fid(fake: FeatureSums, real: RealStats) -> float:
    mean, cov = fake.moments()
    return frechet_from_sqrt(real.mean, real.cov_sqrt, mean, cov)


def _reduce(comm: Comm, buf: np.ndarray) -> np.ndarray:
    """Collective: the element-wise sum over ranks of a float64 buffer, on rank 0."""
    from mpi4py import MPI

    out = np.zeros_like(buf) if comm.rank == 0 else None
    comm.Reduce(np.ascontiguousarray(buf), out, op=MPI.SUM, root=0)
    return out


def evaluate(comm: Comm, opts: EvalOptions, log: Any = print) -> dict[str, Any] | None:
    """Collective: score the samples; rank 0 returns the results (others None) and writes them."""
    t0 = time.perf_counter()
    src = agree(comm, lambda: resolve_source(opts), root=0)
    class_ids = [k for k, c in enumerate(src.counts) if c > 0]
    ctx = build_context(comm, class_ids, opts.devices, 0)
    torch.set_num_threads(ctx.threads)
    device = ctx.device_d
    net = agree(
        comm,
        lambda: load_network(opts.network, opts.weights, device, src.channels, src.resolution),
    )
    agree(comm, lambda: check_classes(net, src))

    # ---- the real statistics: cached beside the data file, computed over all ranks if missing --
    stats_path, real_info = None, None
    t_real = time.perf_counter()
    if src.data:
        real_info = agree(comm, lambda: check_real(src), root=0)
        stats_path = ensure_real_stats(comm, real_info, net, opts.batch_size, log)
    real_s = time.perf_counter() - t_real

    # ---- this rank's classes: read or generate, classify, keep sums ----------------------------
    gens: dict[int, Any] = {}
    if src.kind == "run":
        from distcgan.eval.sample import load_generators
        from distcgan.run.rundir import read_config

        run = Path(src.path)
        gens = agree(
            comm,
            lambda: load_generators(
                run,
                read_config(run),
                src.channels,
                len(src.class_names),
                ctx.owned_class_ids,
                ctx.device_g,
            ),
        )
    t_score = time.perf_counter()
    split_of = split_assignment(src.n, opts.splits, opts.seed)
    offsets = src.offsets
    accuracy_possible = src.labelled and net.num_outputs == len(src.class_names)
    is_sums = ISSums.zeros(opts.splits, net.num_outputs)
    fake = FeatureSums.zeros(net.feature_dim)
    # The overall precision/recall's share of each class: fake rows, and real rows when there
    # is real data (the same numbers on every rank: src and real_info are agreed).
    take_fake = dict(zip(class_ids, proportional_take([src.counts[k] for k in class_ids], PR_MAX)))
    real_used = [min(real_info.counts[k], PR_REAL_PER_CLASS) for k in class_ids] if src.data else []
    take_real = dict(zip(class_ids, proportional_take(real_used, PR_MAX))) if src.data else {}
    pr_fake, pr_real = [], []
    rows = []
    from distcgan.progress import bar as progress_bar

    mine = sum(src.counts[k] for k in ctx.owned_class_ids)
    bar = progress_bar(mine, "rank 0 scored", "img", opts.progress, comm.rank)
    for k in ctx.owned_class_ids:
        try:
            t_class = time.perf_counter()
            images = _images(src, k, gens, opts.seed, ctx.device_g)
            sums, predicted, feats = score_class(
                net, images, split_of[offsets[k] : offsets[k + 1]], is_sums, opts.batch_size, bar
            )
            fake = fake + sums
            precision = recall = None
            pr_fake.append(feats[: take_fake[k]].float().cpu().numpy())
            if src.data:
                real_feats = real_features(net, src.data, k, opts.seed, opts.batch_size)
                pr_real.append(real_feats[: take_real[k]].float().cpu().numpy())
                if src.labelled:
                    precision, recall = _pr(real_feats, feats, device)
            real_k = read_class(stats_path, k) if stats_path else None
            rows.append(
                {
                    "class_id": k,
                    "name": src.class_names[k],
                    "n": len(images),
                    "accuracy": float(np.mean(predicted == k)) if accuracy_possible else None,
                    "correct": int(np.sum(predicted == k)),
                    "fid": (
                        _fid(sums, real_k)
                        if src.labelled and real_k is not None and sums.n >= 2
                        else None
                    ),
                    "precision": precision,
                    "recall": recall,
                    "rank": comm.rank,
                    "score_s": round(time.perf_counter() - t_class, 3),
                }
            )
        except Exception as exc:
            raise ClassFailure(k, exc) from exc
    bar.close()
    score_s = time.perf_counter() - t_score

    # ---- what crosses ranks: per-split sums, fake feature sums, a few numbers per class --------
    is_total = _reduce(comm, is_sums.pack())
    d = net.feature_dim
    fake_total = _reduce(comm, np.concatenate([[fake.n], fake.total, fake.outer.ravel()]))
    gathered = comm.gather(rows, root=0)
    pr_parts = comm.gather((pr_fake, pr_real), root=0)  # about PR_MAX rows of each in all
    score_s_max = comm.reduce(score_s, op=_max_op(), root=0)
    if comm.rank != 0:
        return None

    rows = sorted((r for part in gathered for r in part), key=lambda r: r["class_id"])
    is_mean, is_std, is_splits = inception_score(ISSums.unpack(is_total))
    fid = None
    if stats_path and fake_total[0] >= 2:
        fake_all = FeatureSums(
            float(fake_total[0]), fake_total[1 : 1 + d], fake_total[1 + d :].reshape(d, d)
        )
        fid = _fid(fake_all, read_real(stats_path, class_ids))
    precision = recall = None
    if src.data:
        all_fake = np.concatenate([a for fakes, _ in pr_parts for a in fakes])
        all_real = np.concatenate([a for _, reals in pr_parts for a in reals])
        precision, recall = _pr(torch.from_numpy(all_real), torch.from_numpy(all_fake), device)
    accuracy = None
    if accuracy_possible:
        accuracy = {
            "overall": sum(r["correct"] for r in rows) / src.n,
            "per_class": {str(r["class_id"]): r["accuracy"] for r in rows},
        }
    result = {
        "is_mean": is_mean,
        "is_std": is_std,
        "is_splits": is_splits,
        "fid": fid,
        "per_class_fid": (
            {str(r["class_id"]): r["fid"] for r in rows} if stats_path and src.labelled else None
        ),
        "class_accuracy": accuracy,
        "precision": precision,
        "recall": recall,
        "per_class_precision": (
            {str(r["class_id"]): r["precision"] for r in rows}
            if src.data and src.labelled
            else None
        ),
        "per_class_recall": (
            {str(r["class_id"]): r["recall"] for r in rows} if src.data and src.labelled else None
        ),
        "pr": {"k": PR_K, "max_rows": PR_MAX, "real_per_class": PR_REAL_PER_CLASS},
        "labelled": src.labelled,
        "network": net.name,
        "network_file": net.path,
        "network_sha256": net.sha256,
        "num_outputs": net.num_outputs,
        "feature_dim": net.feature_dim,
        "n": src.n,
        "splits": opts.splits,
        "split_sizes": [int(x) for x in np.bincount(split_of, minlength=opts.splits)],
        "seed": opts.seed,
        "source": src.kind,
        "samples": src.path if src.kind == "samples" else None,
        "run": src.path if src.kind == "run" else None,
        "data": src.data,
        "real_stats": str(stats_path) if stats_path else None,
        "classes": [{k: v for k, v in r.items() if k != "correct"} for r in rows],
        "ranks": comm.size,
        "real_stats_s": round(real_s, 3),
        "score_s": round(score_s_max, 3),
        "eval_s": round(time.perf_counter() - t0, 3),
    }
    out = Path(opts.json) if opts.json else default_json(src, net)
    from distcgan.run.rundir import write_json

    write_json(out, result)
    log(report(result, out))
    return result


def _max_op() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def default_json(src: Source, net: Network) -> Path:
    """RUN/evaluate-NETWORK.json, or SAMPLES_STEM.evaluate-NETWORK.json beside a sample file."""
    if src.kind == "run":
        return Path(src.path) / f"evaluate-{net.tag}.json"
    path = Path(src.path)
    return path.with_name(f"{path.stem}.evaluate-{net.tag}.json")


def report(result: dict[str, Any], out: Path) -> str:
    """The printed table: one row per class, then the global scores."""

    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)

    rows = [
        {
            "class_id": r["class_id"],
            "name": r["name"],
            "samples": r["n"],
            "accuracy": num(r["accuracy"], ".3f"),
            "fid": num(r["fid"], ".2f"),
            "precision": num(r.get("precision"), ".3f"),
            "recall": num(r.get("recall"), ".3f"),
            "rank": r["rank"],
        }
        for r in result["classes"]
    ]
    acc = result["class_accuracy"]
    lines = [
        format_table(
            rows,
            ["class_id", "name", "samples", "accuracy", "fid", "precision", "recall", "rank"],
        ),
        f"network {result['network']} ({result['num_outputs']} outputs, "
        f"{result['feature_dim']} features), {result['n']} samples on {result['ranks']} rank(s)",
        f"Inception Score {result['is_mean']:.4f} +- {result['is_std']:.4f} over "
        f"{result['splits']} splits (seeded random permutation, seed {result['seed']})",
        f"FID {num(result['fid'], '.3f')}"
        + (f" against {result['data']}" if result["data"] else " (no --data: no FID)"),
        f"precision {num(result['precision'], '.4f')}, recall {num(result['recall'], '.4f')} "
        f"(k={result['pr']['k']} nearest neighbours in the network's features"
        + ("" if result["data"] else "; no --data: none")
        + ")",
        "class accuracy "
        + (
            f"{acc['overall']:.4f}"
            if acc
            else "- (unlabelled samples of an unconditional G: no class to check)"
            if not result["labelled"]
            else f"- (the network's {result['num_outputs']} outputs are not the data's classes)"
        ),
        f"wrote {out} ({result['eval_s']:.1f} s)",
    ]
    return "\n".join(lines)
