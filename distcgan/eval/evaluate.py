"""`distcgan evaluate`: Inception Score, FID, per-class FID and classifier accuracy, over ranks.

Every rank scores the samples of its own classes (read from a sample file, or generated on the
fly from a run's checkpoints) and keeps, per split, the sums of the Inception Score and, per
class, the feature sums of FID. What crosses the network: one reduction of the per-split sums
(splits x (num_outputs + 2) numbers), one of the fake feature sums (1 + D + D^2 numbers), one of
the counts of the network's labels (num_outputs numbers), and a gather of a few numbers per
class. Never an image, never a per-sample vector.

Samples are numbered in the class-sorted layout of a sample file (class k holds rows
offsets[k]:offsets[k+1]); sample i goes to split `scores.split_assignment(n, splits, seed)[i]`,
a seeded random permutation, so the splits do not depend on the number of ranks and each holds
every class. With --run, class k's samples are exactly those `distcgan sample --run RUN --seed
SEED --per-class n_k` writes (n_k = n / K, the first n % K classes one more).
Unlabelled samples (a gan run, or its sample file) get the Inception Score and the FID against
every scored class's real images; class accuracy and per-class FID need labels and are none.
When the network's outputs are the data's classes (a distcgan classifier), the share of all the
samples it assigns to each class is kept too (`label_shares`): for an unconditional G, which
classes it draws, and how far it has collapsed onto a few.

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

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distcgan.data import DatasetInfo, is_unlabelled, load_class, read_info
from distcgan.env import provenance
from distcgan.errors import ClassFailure, UserError
from distcgan.eval.metrics.networks import Network, load_network, network_tag
from distcgan.eval.metrics.precision_recall import K as PR_K
from distcgan.eval.metrics.precision_recall import precision_recall, proportional_take
from distcgan.eval.metrics.realstats import (
    DeviceSums,
    RealStats,
    batches,
    ensure_real_stats,
    read_class,
    read_real,
)
from distcgan.eval.metrics.scores import (
    FeatureSums,
    ISSums,
    frechet_from_sqrt,
    inception_score,
    split_assignment,
)
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context, format_table
from distcgan.options import EVALUATE_N, EvalOptions
from distcgan.plan import class_seed
from distcgan.run.atomic import check_out_file

PR_MAX = 10_000  # fake (and real) feature rows of the overall precision/recall, about
PR_REAL_PER_CLASS = 1_000  # real images of a class whose features precision/recall use, at most


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
    src = _samples_source(opts) if opts.samples else _run_source(opts)
    if src.n < opts.splits:
        raise UserError(f"--splits {opts.splits} is more than the {src.n} samples: lower --splits")
    # Before the network loads and any image is scored: an existing result is kept unless told.
    check_out_file(out_json(opts, src), "--json", "evaluate.json", overwrite=opts.overwrite)
    return src


def _samples_source(opts: EvalOptions) -> Source:
    """A sample file, every image of it (or of `opts.classes`)."""
    assert opts.samples is not None
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
    return Source(
        "samples",
        opts.samples,
        info.class_names,
        counts,
        info.resolution,
        info.channels,
        opts.data,
        labelled=not is_unlabelled(opts.samples),
    )


def _run_source(opts: EvalOptions) -> Source:
    """A trained run, to sample `opts.n` images from (split evenly over its classes)."""
    from distcgan.run.rundir import RunDir

    if opts.classes is not None:
        raise UserError("classes applies to --samples; a run is scored on its own classes")
    run = Path(opts.run or "")
    cfg = RunDir(run).read_config()
    dataset = RunDir(run).read_dataset()
    names = tuple(dataset["class_names"])
    classes = cfg.classes or tuple(range(len(names)))
    n = EVALUATE_N if opts.n is None else opts.n
    if n < len(classes):
        raise UserError(
            f"--n {n} is fewer than the run's {len(classes)} classes: pass --n >= {len(classes)}"
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
    return Source(
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
    from distcgan.eval.sampling.sample import generate

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


def _reduce(comm: Comm, buf: np.ndarray) -> np.ndarray | None:
    """Collective: the element-wise sum over ranks of a float64 buffer, on rank 0 (None
    elsewhere)."""
    from mpi4py import MPI

    out = np.zeros_like(buf) if comm.rank == 0 else None
    comm.Reduce(np.ascontiguousarray(buf), out, op=MPI.SUM, root=0)
    return out


# ---- the statistics: per class on its rank, then one reduction ----------------------------------


@dataclass(frozen=True)
class Scoring:
    """What every rank agreed on before scoring: the source, the network, the classes, the
    cached real statistics (None without real data), each sample's split, and each class's
    share of the overall precision/recall's rows."""

    opts: EvalOptions
    src: Source
    net: Network
    class_ids: list[int]
    stats_path: Path | None
    split_of: np.ndarray
    take_fake: dict[int, int]
    take_real: dict[int, int]

    @property
    def outputs_are_classes(self) -> bool:
        """Whether the network's outputs are the data's classes: a classifier of the data, or
        an ImageNet Inception on all of ImageNet-1k (data_prep's sorted-wnid order is its)."""
        return self.net.num_outputs == len(self.src.class_names)

    @property
    def accuracy_possible(self) -> bool:
        """Labelled samples and a network whose outputs are the data's classes."""
        return self.src.labelled and self.outputs_are_classes


@dataclass
class Stats:
    """The sufficient statistics of one rank's classes, or of all ranks' after `reduce_stats`:
    per-split Inception sums, the fake features' sums, one row per class, and the feature rows
    kept for the overall precision/recall."""

    is_sums: ISSums
    fake: FeatureSums
    rows: list[dict[str, Any]]
    pr_fake: list[np.ndarray]
    pr_real: list[np.ndarray]
    rank: int = 0  # the rank that scored the classes (before the reduction)
    score_s: float = 0.0
    # Per output of the network, how many samples it assigns to it (argmax), summed as the rest.
    labels: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))


def class_stats(s: Scoring, k: int, images: np.ndarray, stats: Stats, bar: Any) -> None:
    """Class k's samples scored on this rank, into `stats`: its Inception and feature sums, its
    row (accuracy, FID, precision and recall against its own real images) and its share of the
    rows of the overall precision/recall."""
    t_class = time.perf_counter()
    opts, src, net, k_slice = s.opts, s.src, s.net, slice(s.src.offsets[k], s.src.offsets[k + 1])
    sums, predicted, feats = score_class(
        net, images, s.split_of[k_slice], stats.is_sums, opts.batch_size, bar
    )
    stats.fake = stats.fake + sums
    stats.labels += np.bincount(predicted, minlength=s.net.num_outputs)
    precision = recall = None
    stats.pr_fake.append(feats[: s.take_fake[k]].float().cpu().numpy())
    if src.data:
        real_feats = real_features(net, src.data, k, opts.seed, opts.batch_size)
        stats.pr_real.append(real_feats[: s.take_real[k]].float().cpu().numpy())
        if src.labelled:
            precision, recall = _pr(real_feats, feats, net.device)
    real_k = read_class(s.stats_path, k) if s.stats_path else None
    fid = _fid(sums, real_k) if src.labelled and real_k is not None and sums.n >= 2 else None
    stats.rows.append(
        {
            "class_id": k,
            "name": src.class_names[k],
            "n": len(images),
            "accuracy": float(np.mean(predicted == k)) if s.accuracy_possible else None,
            "correct": int(np.sum(predicted == k)),
            "fid": fid,
            "precision": precision,
            "recall": recall,
            "rank": stats.rank,
            "score_s": round(time.perf_counter() - t_class, 3),
        }
    )


def reduce_stats(comm: Comm, mine: Stats, feature_dim: int) -> Stats | None:
    """Collective, the one reduction: per-split sums and fake feature sums summed over ranks,
    the class rows and the precision/recall rows gathered (about PR_MAX of each in all), the
    slowest rank's scoring time; on rank 0 (None elsewhere)."""
    d = feature_dim
    is_total = _reduce(comm, mine.is_sums.pack())
    fake = mine.fake
    fake_total = _reduce(comm, np.concatenate([[fake.n], fake.total, fake.outer.ravel()]))
    labels = _reduce(comm, mine.labels.astype(np.float64))
    gathered = comm.gather(mine.rows, root=0)
    pr_parts = comm.gather((mine.pr_fake, mine.pr_real), root=0)
    score_s_max = comm.reduce(mine.score_s, op=_max_op(), root=0)
    if comm.rank != 0:
        return None
    assert is_total is not None and fake_total is not None  # reduced and gathered on rank 0
    assert gathered is not None and pr_parts is not None and labels is not None
    return Stats(
        is_sums=ISSums.unpack(is_total),
        fake=FeatureSums(
            float(fake_total[0]), fake_total[1 : 1 + d], fake_total[1 + d :].reshape(d, d)
        ),
        rows=sorted((r for part in gathered for r in part), key=lambda r: r["class_id"]),
        pr_fake=[a for fakes, _ in pr_parts for a in fakes],
        pr_real=[a for _, reals in pr_parts for a in reals],
        score_s=score_s_max,
        labels=labels,
    )


# ---- the metrics: each a short function of the reduced statistics -----------------------------


def metric_is(s: Scoring, st: Stats) -> dict[str, Any]:
    is_mean, is_std, is_splits = inception_score(st.is_sums)
    return {"is_mean": is_mean, "is_std": is_std, "is_splits": is_splits}


def metric_fid(s: Scoring, st: Stats) -> dict[str, Any]:
    """FID over every scored class against their real images, and each class's own."""
    fid = None
    if s.stats_path and st.fake.n >= 2:
        fid = _fid(st.fake, read_real(s.stats_path, s.class_ids))
    per_class = None
    if s.stats_path and s.src.labelled:
        per_class = {str(r["class_id"]): r["fid"] for r in st.rows}
    return {"fid": fid, "per_class_fid": per_class}


def metric_accuracy(s: Scoring, st: Stats) -> dict[str, Any]:
    """The fraction of class-k samples the network assigns to class k, overall and per class."""
    if not s.accuracy_possible:
        return {"class_accuracy": None}
    return {
        "class_accuracy": {
            "overall": sum(r["correct"] for r in st.rows) / s.src.n,
            "per_class": {str(r["class_id"]): r["accuracy"] for r in st.rows},
        }
    }


def metric_pr(s: Scoring, st: Stats) -> dict[str, Any]:
    """Improved precision and recall (k-NN manifolds), overall and per class."""
    precision = recall = None
    if s.src.data:
        real, fake = np.concatenate(st.pr_real), np.concatenate(st.pr_fake)
        precision, recall = _pr(torch.from_numpy(real), torch.from_numpy(fake), s.net.device)
    labelled = s.src.data and s.src.labelled
    return {
        "precision": precision,
        "recall": recall,
        "per_class_precision": (
            {str(r["class_id"]): r["precision"] for r in st.rows} if labelled else None
        ),
        "per_class_recall": {str(r["class_id"]): r["recall"] for r in st.rows}
        if labelled
        else None,
    }


def metric_shares(s: Scoring, st: Stats) -> dict[str, Any]:
    """The share of all the samples that the network assigns to each class (its outputs are
    the data's classes; else None), by class id: what an unconditional G draws."""
    if not s.outputs_are_classes:
        return {"label_shares": None}
    counts = st.labels
    return {"label_shares": {str(k): float(c / counts.sum()) for k, c in enumerate(counts)}}


METRICS = {
    "is": metric_is,
    "fid": metric_fid,
    "accuracy": metric_accuracy,
    "pr": metric_pr,
    "shares": metric_shares,
}


@dataclass
class EvalResult:
    """What `distcgan evaluate` computed and writes (evaluate-NETWORK.json, in this order)."""

    is_mean: float
    is_std: float
    is_splits: list[float]
    fid: float | None
    per_class_fid: dict[str, float | None] | None
    class_accuracy: dict[str, Any] | None
    label_shares: dict[str, float] | None  # of all samples, by the network's label (class id)
    precision: float | None
    recall: float | None
    per_class_precision: dict[str, float | None] | None
    per_class_recall: dict[str, float | None] | None
    pr: dict[str, int]
    labelled: bool
    network: str
    network_file: str
    network_sha256: str
    num_outputs: int
    feature_dim: int
    n: int
    splits: int
    split_sizes: list[int]
    seed: int
    source: str
    samples: str | None
    run: str | None
    data: str | None
    real_stats: str | None
    classes: list[dict[str, Any]]
    ranks: int
    real_stats_s: float
    score_s: float
    eval_s: float
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)  # env.provenance

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def evaluate(comm: Comm, opts: EvalOptions, log: Any = print) -> EvalResult | None:
    """Collective: score the samples; rank 0 returns the results (others None) and writes them."""
    t0 = time.perf_counter()
    s, ctx, real_s = _setup(comm, opts, log)
    mine = _score_mine(comm, s, ctx)
    stats = reduce_stats(comm, mine, s.net.feature_dim)
    if stats is None:
        return None
    metrics: dict[str, Any] = {}
    for metric in METRICS.values():
        metrics.update(metric(s, stats))
    src, net = s.src, s.net
    result = EvalResult(
        is_mean=metrics["is_mean"],
        is_std=metrics["is_std"],
        is_splits=metrics["is_splits"],
        fid=metrics["fid"],
        per_class_fid=metrics["per_class_fid"],
        class_accuracy=metrics["class_accuracy"],
        label_shares=metrics["label_shares"],
        precision=metrics["precision"],
        recall=metrics["recall"],
        per_class_precision=metrics["per_class_precision"],
        per_class_recall=metrics["per_class_recall"],
        pr={"k": PR_K, "max_rows": PR_MAX, "real_per_class": PR_REAL_PER_CLASS},
        labelled=src.labelled,
        network=net.name,
        network_file=net.path,
        network_sha256=net.sha256,
        num_outputs=net.num_outputs,
        feature_dim=net.feature_dim,
        n=src.n,
        splits=opts.splits,
        split_sizes=[int(x) for x in np.bincount(s.split_of, minlength=opts.splits)],
        seed=opts.seed,
        source=src.kind,
        samples=src.path if src.kind == "samples" else None,
        run=src.path if src.kind == "run" else None,
        data=src.data,
        real_stats=str(s.stats_path) if s.stats_path else None,
        classes=[{k: v for k, v in r.items() if k != "correct"} for r in stats.rows],
        ranks=comm.size,
        real_stats_s=round(real_s, 3),
        score_s=round(stats.score_s, 3),
        eval_s=round(time.perf_counter() - t0, 3),
        provenance=provenance("evaluate", opts),
    )
    out = out_json(opts, src)
    from distcgan.run.rundir import write_json

    write_json(out, result.to_dict())
    log(report(result, out))
    return result


def _setup(comm: Comm, opts: EvalOptions, log: Any) -> tuple[Scoring, Any, float]:
    """Collective: what every rank agrees on before scoring (the source checked on rank 0, the
    network loaded on every rank, the real statistics read from their cache or computed
    over all ranks if missing), this rank's context, and the seconds the real statistics took."""
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
    stats_path, real_info = None, None
    t_real = time.perf_counter()
    if src.data:
        real_info = agree(comm, lambda: check_real(src), root=0)
        stats_path = ensure_real_stats(comm, real_info, net, opts.batch_size, log, opts.stats_dir)
    real_s = time.perf_counter() - t_real
    # The overall precision/recall's share of each class: fake rows, and real rows when there
    # is real data (the same numbers on every rank: src and real_info are agreed).
    take_fake = dict(zip(class_ids, proportional_take([src.counts[k] for k in class_ids], PR_MAX)))
    take_real = {}
    if real_info is not None:
        real_used = [min(real_info.counts[k], PR_REAL_PER_CLASS) for k in class_ids]
        take_real = dict(zip(class_ids, proportional_take(real_used, PR_MAX)))
    split_of = split_assignment(src.n, opts.splits, opts.seed)
    scoring = Scoring(opts, src, net, class_ids, stats_path, split_of, take_fake, take_real)
    return scoring, ctx, real_s


def _score_mine(comm: Comm, s: Scoring, ctx: Any) -> Stats:
    """Collective (loading a run's generators): this rank's classes read or generated,
    classified, and kept as sums."""
    from distcgan.progress import bar as progress_bar

    src, opts = s.src, s.opts
    gens: dict[int, Any] = {}
    if src.kind == "run":
        from distcgan.eval.sampling.sample import load_generators
        from distcgan.run.rundir import read_config

        run, n_classes = Path(src.path), len(src.class_names)
        gens = agree(
            comm,
            lambda: load_generators(
                run, read_config(run), src.channels, n_classes, ctx.owned_class_ids, ctx.device_g
            ),
        )
    t_score = time.perf_counter()
    net = s.net
    is_sums, fake = ISSums.zeros(opts.splits, net.num_outputs), FeatureSums.zeros(net.feature_dim)
    stats = Stats(is_sums, fake, rows=[], pr_fake=[], pr_real=[], rank=comm.rank)
    stats.labels = np.zeros(net.num_outputs)
    mine = sum(src.counts[k] for k in ctx.owned_class_ids)
    bar = progress_bar(mine, "rank 0 scored", "img", opts.progress, comm.rank)
    for k in ctx.owned_class_ids:
        try:
            images = _images(src, k, gens, opts.seed, ctx.device_g)
            class_stats(s, k, images, stats, bar)
        except Exception as exc:
            raise ClassFailure(k, exc) from exc
    bar.close()
    stats.score_s = time.perf_counter() - t_score
    return stats


def _max_op() -> Any:
    from mpi4py import MPI

    return MPI.MAX


def out_json(opts: EvalOptions, src: Source) -> Path:
    """--json, else RUN/evaluate-NETWORK.json, or SAMPLES_STEM.evaluate-NETWORK.json beside a
    sample file (NETWORK: networks.network_tag, the tag the loaded network has)."""
    if opts.json:
        return Path(opts.json)
    tag = network_tag(opts.network)
    if src.kind == "run":
        return Path(src.path) / f"evaluate-{tag}.json"
    path = Path(src.path)
    return path.with_name(f"{path.stem}.evaluate-{tag}.json")


def report(res: EvalResult, out: Path) -> str:
    """The printed table: one row per class, then the global scores."""
    result = res.to_dict()

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
        *_shares_line(result),
        f"wrote {out} ({result['eval_s']:.1f} s)",
    ]
    return "\n".join(lines)


def _shares_line(result: dict[str, Any]) -> list[str]:
    """The classes the network says the samples are: the most drawn first, and the least (or
    those never drawn); by class id (none without shares)."""
    shares = result.get("label_shares")
    if not shares:
        return []
    order = sorted(shares, key=lambda k: -shares[k])
    never = [k for k in order if shares[k] == 0]
    most = ", ".join(f"{k} {shares[k]:.1%}" for k in order[:3])
    if never:
        listed = ", ".join(never[:10]) + (", ..." if len(never) > 10 else "")
        least = f"never drawn: {len(never)} class(es) ({listed})"
    else:
        least = f"least {order[-1]} {shares[order[-1]]:.1%}"
    return [f"the network's labels of the samples (class ids), most drawn first: {most}; {least}"]
