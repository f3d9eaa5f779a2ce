"""What `distcgan evaluate` scores, the same on every rank: a sample file, or a run to sample
from (`Source`, checked and read on rank 0 without any image), and class k's images of it.

Samples are numbered in the class-sorted layout of a sample file (class k holds rows
offsets[k]:offsets[k+1]). With --run, class k's samples are exactly those `distcgan sample --run
RUN --seed SEED --per-class n_k` writes (n_k = n / K, the first n % K classes one more).
A gan run's samples, or its sample file, are unlabelled: their rows have no class.
Also here: the checks that the real data file and a classifier match the samples, and where the
result is written (out_json). Leaves out: scoring the images (eval/metrics/).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distcgan.data import DatasetInfo, is_unlabelled, load_class, read_info
from distcgan.errors import UserError
from distcgan.eval.metrics.networks import Network, network_tag
from distcgan.eval.sampling.generators import generate
from distcgan.options import EVALUATE_N, EvalOptions
from distcgan.plan import class_seed
from distcgan.run.atomic import check_out_file
from distcgan.run.rundir import RunDir


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
    """A distcgan classifier records the classes it was trained on: they must be the samples'."""
    names = net.metadata.get("class_names")
    if names is not None and tuple(names) != src.class_names:
        raise UserError(
            f"classifier {net.path} was trained on classes {names[:4]}... but the samples have "
            f"{list(src.class_names)[:4]}...: train one on the samples' data file"
        )


def class_images(src: Source, k: int, gens: dict[int, Any], seed: int, device: str) -> np.ndarray:
    """Class k's images: read from the sample file, or drawn from its G in `gens` (class id ->
    G, as generators.load_generators gives them) with `distcgan sample --seed`'s noise."""
    if src.kind == "samples":
        return load_class(src.path, k)
    sample_seed = class_seed(src.run_seed + seed, k, "sample")  # as `distcgan sample --seed`
    return generate(gens[k], src.counts[k], src.z_dim, sample_seed, device)


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
