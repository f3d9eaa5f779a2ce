"""`distcgan evaluate`: Inception Score, FID, per-class FID, classifier accuracy, precision and
recall, over ranks: the command's three steps, each a collective.

1. Agree on what is scored (sampling/source.py, checked on rank 0), load the network on every
   rank, and read the real statistics from their cache or compute them over all ranks once
   (metrics/realstats.py).
2. Score this rank's classes, read from the sample file or generated on the fly from the run's
   checkpoints, into sums (metrics/stats.py's class_stats).
3. Reduce the sums on rank 0 (metrics/stats.py's reduce_stats), which computes the metrics
   (metrics/summary.py) and writes and prints the record (metrics/result.py).
Sample i goes to split `scores.split_assignment(n, splits, seed)[i]`, a seeded random
permutation of the class-sorted rows, so the splits do not depend on the number of ranks and
each holds every class. Leaves out: every one of those steps' own work (the modules named).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from distcgan.errors import ClassFailure
from distcgan.eval.metrics.features import pr_takes
from distcgan.eval.metrics.networks import load_network
from distcgan.eval.metrics.realstats import ensure_real_stats
from distcgan.eval.metrics.result import EvalResult, make_result, report
from distcgan.eval.metrics.scores import FeatureSums, ISSums, split_assignment
from distcgan.eval.metrics.stats import Scoring, Stats, class_stats, reduce_stats
from distcgan.eval.sampling.generators import load_generators
from distcgan.eval.sampling.source import (
    check_classes,
    check_real,
    class_images,
    out_json,
    resolve_source,
)
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree, build_context
from distcgan.options import EvalOptions
from distcgan.progress import bar as progress_bar
from distcgan.run.rundir import read_config, write_json


def evaluate(comm: Comm, opts: EvalOptions, log: Any = print) -> EvalResult | None:
    """Collective: score the samples; rank 0 returns the results (others None) and writes them."""
    t0 = time.perf_counter()
    s, ctx, real_s = _setup(comm, opts, log)
    mine = _score_mine(comm, s, ctx)
    stats = reduce_stats(comm, mine, s.net.feature_dim)
    if stats is None:
        return None
    result = make_result(s, stats, comm.size, real_s, t0)
    out = out_json(opts, s.src)
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
    real_counts = real_info.counts if real_info is not None else None
    take_fake, take_real = pr_takes(class_ids, src.counts, real_counts)
    split_of = split_assignment(src.n, opts.splits, opts.seed)
    scoring = Scoring(opts, src, net, class_ids, stats_path, split_of, take_fake, take_real)
    return scoring, ctx, real_s


def _score_mine(comm: Comm, s: Scoring, ctx: Any) -> Stats:
    """Collective (loading a run's generators): this rank's classes read or generated,
    classified, and kept as sums."""
    src, opts = s.src, s.opts
    gens: dict[int, Any] = {}
    if src.kind == "run":
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
            images = class_images(src, k, gens, opts.seed, ctx.device_g)
            class_stats(s, k, images, stats, bar)
        except Exception as exc:
            raise ClassFailure(k, exc) from exc
    bar.close()
    stats.score_s = time.perf_counter() - t_score
    return stats
