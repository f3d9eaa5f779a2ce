"""Scores during training (--score-every N): a pair's G scored at its log steps, with `evaluate`'s
own pieces (eval/metrics/features.py), so that a run draws its learning curve as it trains
(score_fid, score_precision, score_recall, score_accuracy in its metrics lines; the report draws
them).

What a score is, for one pair at one step: cfg.score_n images from its moving-average G (else G),
in eval mode, from a noise stream of its own (seeded from the run seed, the class and "score":
the same noise at every score, so the curve follows G, not the draw; the same for class k's own
G and for a cgan's asked for k), through the scoring network;
then per class of the pair, against that class's real images: FID from the cached real statistics
(eval/metrics/realstats.py, the file `evaluate` uses), precision and recall against the features of
at most PR_REAL_PER_CLASS of its real images (computed once per class and kept), and the fraction
the network assigns to the class (when its outputs are the data's classes). A cgan pair draws
score_n / K images of each of its K classes and reports the means over them, as a per-class pair
reports its one class; a gan pair's draws have no class: they are scored against all its classes
together (FID against their pooled statistics, precision and recall against their pooled real
features) and have no class accuracy. Every pair also reports score_fid_pooled: the FID of all its
draws together against its classes' pooled statistics, the measure a gan pair's score_fid is, so
that the curves of a gan and a cgan run compare like with like (a one-class pair's is its
score_fid).

Training is untouched: no random stream of the pair is drawn from, G's mode is restored, and the
loop does not count the time as training time. Only a group's first rank scores (no collective).
Leaves out: Inception Score (a few thousand draws give a biased one; `evaluate` gives it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo
from distcgan.errors import UserError
from distcgan.eval.metrics.features import fid_against, pr_against, real_features
from distcgan.eval.metrics.networks import Network, load_network
from distcgan.eval.metrics.realstats import (
    DeviceSums,
    batches,
    ensure_real_stats,
    read_class,
    read_real,
)
from distcgan.eval.sampling.generators import FixedLabel, generate
from distcgan.mpi.comm import Comm
from distcgan.mpi.context import agree
from distcgan.options import TrainOptions
from distcgan.plan import Task, class_seed
from distcgan.train.job import train_run
from distcgan.train.pair import Pair

if TYPE_CHECKING:
    from distcgan.faults import Fault

BATCH = 100  # images per network call
REAL_SEED = 0  # the real images' subset for precision/recall: evaluate's default --seed


@dataclass
class Scorer:
    """The scoring network and the real statistics, shared by a rank's pairs."""

    cfg: TrainConfig
    net: Network
    stats_path: Path
    classes: int  # the data's: class accuracy needs a network whose outputs are they
    real: dict[int, torch.Tensor] = field(default_factory=dict)  # class -> real features

    def score(self, pair: Pair, task: Task) -> dict[str, Any]:
        """The pair's score_* values now (call it on the group's first rank only)."""
        t0 = time.perf_counter()
        cfg, ks = self.cfg, task.class_ids
        G = pair.G_ema if pair.G_ema is not None else pair.G
        training = G.training
        G.eval()
        device = str(next(G.parameters()).device)
        try:
            if task.conditional:
                n_k = max(cfg.score_n // len(ks), 1)
                per = [
                    self._class(
                        generate(FixedLabel(G, k), n_k, cfg.z_dim, self._seed(k), device), k
                    )
                    for k in ks
                ]
            elif len(ks) == 1:
                per = [
                    self._class(
                        generate(G, cfg.score_n, cfg.z_dim, self._seed(ks[0]), device), ks[0]
                    )
                ]
            else:
                per = [
                    self._pooled(
                        generate(G, cfg.score_n, cfg.z_dim, self._seed(task.key), device), ks
                    )
                ]
        finally:
            G.train(training)
        out: dict[str, Any] = {}
        pooled = self._pooled_fid(per, ks)
        if pooled is not None:
            out["score_fid_pooled"] = pooled
        for key in ("fid", "precision", "recall", "accuracy"):
            values = [p[key] for p in per if p[key] is not None]
            if values:
                out[f"score_{key}"] = float(np.mean(values))
        out["score_n"] = sum(p["n"] for p in per)
        out["score_s"] = round(time.perf_counter() - t0, 3)
        return out

    def _seed(self, key: int) -> int:
        """The score's noise seed: class k's is the same for its per-class G and for a cgan's G
        asked for k."""
        return class_seed(self.cfg.seed, key, "score")

    def _features(self, images: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        logits, feats = zip(*(self.net(b) for b in batches(images, BATCH)))
        return torch.cat(logits), torch.cat(feats)

    def _real(self, k: int) -> torch.Tensor:
        if k not in self.real:
            self.real[k] = real_features(self.net, self.cfg.data, k, REAL_SEED, BATCH)
        return self.real[k]

    def _class(self, images: np.ndarray, k: int) -> dict[str, Any]:
        logits, feats = self._features(images)
        sums = DeviceSums(self.net.feature_dim, self.net.device)
        sums.add(feats)
        real = read_class(self.stats_path, k)
        precision, recall = pr_against(self._real(k), feats, self.net.device)
        labelled = self.net.num_outputs == self.classes  # as evaluate's accuracy_possible
        fid = fid_against(sums.result(), real) if real is not None and len(images) >= 2 else None
        return {
            "n": len(images),
            "fid": fid,
            "precision": precision,
            "recall": recall,
            "accuracy": float((logits.argmax(1) == k).float().mean()) if labelled else None,
            "features": feats,
        }

    def _pooled(self, images: np.ndarray, ks: tuple[int, ...]) -> dict[str, Any]:
        _, feats = self._features(images)
        sums = DeviceSums(self.net.feature_dim, self.net.device)
        sums.add(feats)
        real = torch.cat([self._real(k) for k in ks])
        precision, recall = pr_against(real, feats, self.net.device)
        fid = (
            fid_against(sums.result(), read_real(self.stats_path, ks)) if len(images) >= 2 else None
        )
        return {"n": len(images), "fid": fid, "precision": precision, "recall": recall,
                "accuracy": None, "features": feats}  # fmt: skip

    def _pooled_fid(self, per: list[dict[str, Any]], ks: tuple[int, ...]) -> float | None:
        """The FID of every draw of the pair together against its classes' pooled real
        statistics (one class, or a gan pair's one draw: its own FID)."""
        if len(per) == 1:
            return per[0]["fid"]
        sums = DeviceSums(self.net.feature_dim, self.net.device)
        for p in per:
            sums.add(p["features"])
        n = sum(p["n"] for p in per)
        return fid_against(sums.result(), read_real(self.stats_path, ks)) if n >= 2 else None


def build_scorer(comm: Comm, cfg: TrainConfig, data: DatasetInfo, device: str) -> Scorer | None:
    """Collective: with --score-every, the scoring network on `device` (checked on rank 0 first,
    so that a wrong file fails before training) and the data's real statistics under it
    (computed over every rank once, then cached beside the data, as `evaluate` does)."""
    if not cfg.score_every:
        return None

    def check() -> None:
        if not cfg.score_network:
            raise UserError(
                "--score-every needs --score-network: a classifier FILE.pt (distcgan classifier "
                "train --out FILE.pt) or inception-v3"
            )
        net = load_network(cfg.score_network, None, "cpu", data.channels, data.resolution)
        names = net.metadata.get("class_names")
        if names is not None and tuple(names) != data.class_names:
            raise UserError(
                f"--score-network {cfg.score_network} was trained on classes {names[:4]}... but "
                f"{data.path} has {list(data.class_names)[:4]}...: train one on this data file"
            )

    agree(comm, check, root=0)
    net = load_network(cfg.score_network, None, device, data.channels, data.resolution)
    path = ensure_real_stats(comm, data, net, BATCH, log=lambda m: print(m, flush=True))
    return Scorer(cfg, net, path, data.num_classes)


def train_with_scorer(
    comm: Comm,
    cfg: TrainConfig,
    opts: TrainOptions,
    fault: Fault | None = None,
    t_start: float | None = None,
) -> int:
    """Collective: one launch of `distcgan train` (train.job.train_run) with --score-every's
    scorer built here; what `distcgan train` and `distcgan compare` call. train/ declares what
    it needs of a scorer (train.task.Scorer) and imports nothing of eval/."""
    return train_run(comm, cfg, opts, fault, t_start, make_scorer=build_scorer)
