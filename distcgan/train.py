"""Per-class DC-GAN training: one independent G/D pair per class, no communication while training.

`train_class` is the whole loop for one class, readable top to bottom: load the class's rows,
build (or restore) G and D, then D step, G step, log / checkpoint / sample. `train_rank` runs a
rank's classes one after another and gathers the results on rank 0 at the end.
Leaves out: data-parallel training of one class over several ranks (a later issue).
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from distcgan import checkpoint
from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo, load_class
from distcgan.dist import RankContext
from distcgan.errors import ClassFailure, UserError
from distcgan.images import grid_scale, save_grid, to_float, to_uint8
from distcgan.models import Discriminator, Generator, init_weights
from distcgan.plan import class_seed
from distcgan.rundir import class_dir, write_json

N_FIXED = 64  # fixed-noise images in each sample grid (8 x 8)


class DivergedError(UserError):
    """A loss became NaN or infinite."""


@dataclass(frozen=True)
class Fault:
    """A failure injected on purpose by the test suite: `kind` at `step` of `class_id`.

    kinds: "raise" (an exception), "nan" (a NaN loss), "kill" (SIGKILL of this rank).
    """

    kind: str
    class_id: int
    step: int

    @staticmethod
    def parse(text: str) -> Fault:
        """Parse "KIND:CLASS:STEP", e.g. "raise:1:3"."""
        try:
            kind, class_id, step = text.split(":")
            fault = Fault(kind, int(class_id), int(step))
        except ValueError:
            raise UserError(f"--inject-fault {text!r}: expected KIND:CLASS:STEP") from None
        if fault.kind not in ("raise", "nan", "kill"):
            raise UserError(f"--inject-fault kind {fault.kind!r}: use raise, nan or kill")
        return fault


def log_event(ctx: RankContext, event: str, **fields: Any) -> None:
    """One JSON line on stdout per event, tagged with the rank, flushed at once."""
    print(json.dumps({"rank": ctx.rank, "event": event, **fields}), flush=True)


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))


def batch_indices(n: int, batch: int, step: int, seed: int) -> torch.Tensor:
    """Rows used at `step`: the step-th batch of an endless stream of shuffled epochs.

    Epoch e is the permutation seeded by seed + e. The stream is a pure function of the step, so
    resuming needs no data-loader state, no image is dropped at an epoch's end, and a class with
    fewer images than the batch size still gets full batches.
    """
    start = step * batch
    first, last = start // n, (start + batch - 1) // n
    stream = torch.cat([_epoch_order(n, seed, e) for e in range(first, last + 1)])
    offset = start - first * n
    return stream[offset : offset + batch]


def _sync(*devices: str) -> None:
    """Wait for queued GPU work so that the clock measures it (a no-op on the CPU)."""
    for dev in set(devices):
        if dev.startswith("cuda"):
            torch.cuda.synchronize(dev)


def _rng_state(devices: tuple[str, ...], noise: torch.Generator) -> dict[str, Any]:
    cuda = {d: torch.cuda.get_rng_state(d) for d in set(devices) if d.startswith("cuda")}
    return {"cpu": torch.get_rng_state(), "cuda": cuda, "noise": noise.get_state()}


def _set_rng_state(state: dict[str, Any], noise: torch.Generator) -> None:
    torch.set_rng_state(state["cpu"])
    for dev, s in state["cuda"].items():
        torch.cuda.set_rng_state(s, dev)
    noise.set_state(state["noise"])


def train_class(
    cfg: TrainConfig,
    ctx: RankContext,
    run: Path,
    data: DatasetInfo,
    class_id: int,
    fault: Fault | None = None,
    advance: Callable[[int], object] = lambda n: None,
) -> dict[str, Any]:
    """Train the G/D pair of one class up to cfg.steps, resuming from its checkpoint if any."""
    dev_g, dev_d = ctx.device_g, ctx.device_d
    cdir = class_dir(run, class_id)
    cdir.mkdir(exist_ok=True)

    # ---- load this class's rows only, onto D's device, as floats in [-1, 1] -----------------
    t0 = time.perf_counter()
    real_all = to_float(load_class(cfg.data, class_id), dev_d)
    n_real = real_all.shape[0]
    _sync(dev_d)
    load_s = time.perf_counter() - t0

    # ---- build G and D from the class's own seeds (never the rank's) --------------------------
    torch.manual_seed(class_seed(cfg.seed, class_id, "init"))  # init, then D's dropout masks
    G = Generator(cfg.z_dim, data.channels, cfg.resolution).apply(init_weights).to(dev_g)
    D = Discriminator(data.channels, cfg.resolution).apply(init_weights).to(dev_d)
    opt_g = torch.optim.Adam(G.parameters(), lr=cfg.lr_g, betas=(cfg.beta1, cfg.beta2))
    opt_d = torch.optim.Adam(D.parameters(), lr=cfg.lr_d, betas=(cfg.beta1, cfg.beta2))
    noise = torch.Generator().manual_seed(class_seed(cfg.seed, class_id, "noise"))
    fixed_gen = torch.Generator().manual_seed(class_seed(cfg.seed, class_id, "fixed"))
    z_fixed = torch.randn(N_FIXED, cfg.z_dim, generator=fixed_gen).to(dev_g)
    data_seed = class_seed(cfg.seed, class_id, "data")
    arch = [cfg.z_dim, data.channels, cfg.resolution]

    # ---- or restore everything (weights, Adam, every RNG) from the newest intact checkpoint ---
    start, train_s_before = 0, 0.0
    state = checkpoint.load_latest(cdir, log=lambda msg: log_event(ctx, "warning", message=msg))
    if state is not None:
        if state["class_id"] != class_id or list(state["arch"]) != arch:
            raise UserError(
                f"checkpoint in {cdir} is for class {state['class_id']} with (z_dim, channels, "
                f"resolution) {list(state['arch'])}, not class {class_id} with {arch}"
            )
        G.load_state_dict(state["G"])
        D.load_state_dict(state["D"])
        opt_g.load_state_dict(state["opt_g"])
        opt_d.load_state_dict(state["opt_d"])
        _set_rng_state(state["rng"], noise)
        start, train_s_before = int(state["step"]), float(state["train_s"])
    metrics_path = cdir / "metrics.jsonl"
    _truncate_metrics(metrics_path, start)
    if start >= cfg.steps:  # finished in an earlier launch: not retrained
        advance(cfg.steps)
        return _result(cfg, ctx, data, class_id, n_real, start, train_s_before, 0, load_s)
    log_event(
        ctx,
        "class_start",
        class_id=class_id,
        name=data.class_names[class_id],
        images=n_real,
        start_step=start,
        steps=cfg.steps,
        device_g=dev_g,
        device_d=dev_d,
    )
    advance(start)

    def save_checkpoint(step: int, train_s: float) -> None:
        checkpoint.save(
            cdir,
            {
                "class_id": class_id,
                "step": step,
                "arch": arch,
                "train_s": train_s,
                "G": G.state_dict(),
                "D": D.state_dict(),
                "opt_g": opt_g.state_dict(),
                "opt_d": opt_d.state_dict(),
                "rng": _rng_state((dev_g, dev_d), noise),
            },
        )

    def save_samples(step: int) -> None:
        G.eval()  # BatchNorm from running statistics: a grid does not depend on its batch
        with torch.no_grad():
            imgs = to_uint8(G(z_fixed))
        G.train()
        side = int(math.sqrt(N_FIXED))
        grid = imgs.reshape(side, side, *imgs.shape[1:])
        save_grid(cdir / f"samples_step{step:07d}.png", grid, scale=grid_scale(cfg.resolution))

    # ---- the training steps -------------------------------------------------------------------
    B = cfg.batch_size
    joint = cfg.d_batch == "joint"
    ones = torch.ones(B, 1, device=dev_d)
    zeros = torch.zeros(B, 1, device=dev_d)
    sums = torch.zeros(4, device=dev_d)  # loss_d, loss_g, D(x), D(G(z)) summed over an interval
    train_s, n_sum = train_s_before, 0
    steps_this_launch = 0
    _sync(dev_g, dev_d)
    tick = time.perf_counter()
    with open(metrics_path, "a") as metrics:
        for step in range(start, cfg.steps):
            real = real_all[batch_indices(n_real, B, step, data_seed).to(dev_d)]
            z = torch.randn(B, cfg.z_dim, generator=noise).to(dev_g)
            # G runs on its device; the fakes cross to D's device inside one autograd graph.
            fake = G(z).to(dev_d)

            # D step: real -> 1, fake -> 0. `detach` stops this backward at D's input.
            logits_real, logits_fake = _d_logits(D, real, fake.detach(), joint)
            loss_d = 0.5 * (
                F.binary_cross_entropy_with_logits(logits_real, ones)
                + F.binary_cross_entropy_with_logits(logits_fake, zeros)
            )
            if fault is not None and (fault.class_id, fault.step) == (class_id, step):
                loss_d = _inject(fault, loss_d)
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()

            # G step: the non-saturating loss -log D(G(z)), through the updated D. D's weights are
            # frozen for it so that this backward computes only what G needs.
            D.requires_grad_(False)
            logits_g = _d_logits(D, real, fake, joint)[1] if joint else D(fake)
            loss_g = F.binary_cross_entropy_with_logits(logits_g, ones)
            opt_g.zero_grad(set_to_none=True)
            loss_g.backward()
            opt_g.step()
            D.requires_grad_(True)

            # ---- log / checkpoint / sample (the only places that wait for the device) --------
            with torch.no_grad():
                sums += torch.stack(
                    [
                        loss_d.detach(),
                        loss_g.detach().to(dev_d),
                        torch.sigmoid(logits_real).mean(),
                        torch.sigmoid(logits_fake).mean(),
                    ]
                )
            n_sum += 1
            steps_this_launch += 1
            done = step + 1
            last = done == cfg.steps
            if done % cfg.log_every == 0 or last or done % cfg.checkpoint_every == 0:
                _sync(dev_g, dev_d)
                now = time.perf_counter()
                train_s += now - tick
                means = (sums / n_sum).tolist()
                line = {
                    "step": done,
                    "loss_d": means[0],
                    "loss_g": means[1],
                    "d_real": means[2],
                    "d_fake": means[3],
                    "s_per_step": (now - tick) / n_sum,
                }
                if not all(math.isfinite(v) for v in means):
                    raise DivergedError(
                        f"class {class_id} diverged: loss is not finite by step {done} "
                        f"(loss_d={means[0]}, loss_g={means[1]}); resume from the last checkpoint "
                        "with a lower --lr-d/--lr-g or another --seed"
                    )
                metrics.write(json.dumps(line) + "\n")
                metrics.flush()
                sums.zero_()
                n_sum = 0
                if done % cfg.checkpoint_every == 0 or last:
                    save_checkpoint(done, train_s)
                if (cfg.sample_every and done % cfg.sample_every == 0) or last:
                    save_samples(done)
                tick = time.perf_counter()  # checkpoint and grid time is not training time
            advance(1)

    result = _result(
        cfg, ctx, data, class_id, n_real, cfg.steps, train_s, steps_this_launch, load_s
    )
    write_json(cdir / "result.json", result)
    log_event(
        ctx, "class_done", **{k: result[k] for k in ("class_id", "steps", "train_s", "imgs_per_s")}
    )
    return result


def _result(
    cfg: TrainConfig,
    ctx: RankContext,
    data: DatasetInfo,
    class_id: int,
    n_real: int,
    steps: int,
    train_s: float,
    steps_this_launch: int,
    load_s: float,
) -> dict[str, Any]:
    """One class's line of summary.json; images/s over all its steps, every launch included."""
    return {
        "class_id": class_id,
        "name": data.class_names[class_id],
        "rank": ctx.rank,
        "host": ctx.host,
        "device_g": ctx.device_g,
        "device_d": ctx.device_d,
        "images": n_real,
        "steps": steps,
        "steps_this_launch": steps_this_launch,
        "train_s": round(train_s, 3),
        "load_s": round(load_s, 3),
        "imgs_per_s": round(steps * cfg.batch_size / max(train_s, 1e-9), 1),
    }


def _d_logits(
    D: torch.nn.Module, real: torch.Tensor, fake: torch.Tensor, joint: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """D's logits for a real and a fake batch.

    "joint" runs them as one batch, so D's BatchNorm layers normalise real and fake with shared
    statistics; as two batches, each is normalised on its own, which at 16 px (1x1 maps before
    D's last layer) leaves every batch with the same mean logit.
    """
    if joint:
        logits = D(torch.cat([real, fake]))
        return logits[: real.shape[0]], logits[real.shape[0] :]
    return D(real), D(fake)


def _inject(fault: Fault, loss: torch.Tensor) -> torch.Tensor:
    if fault.kind == "raise":
        raise RuntimeError(f"injected fault at class {fault.class_id}, step {fault.step}")
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    return loss * float("nan")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past `step` (written after the checkpoint a resume starts from)."""
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    keep = []
    for line in lines:
        try:
            if json.loads(line)["step"] <= step:
                keep.append(line)
        except (json.JSONDecodeError, KeyError):
            break  # a line cut short by a crash: drop it and everything after
    if len(keep) != len(lines):
        path.write_text("".join(keep))


def train_rank(
    cfg: TrainConfig,
    ctx: RankContext,
    run: Path,
    data: DatasetInfo,
    fault: Fault | None,
    advance: Callable[[int], object],
) -> list[dict[str, Any]]:
    """Train this rank's classes one after another (no communication)."""
    torch.set_num_threads(ctx.threads)
    results = []
    for class_id in ctx.class_ids:
        try:
            results.append(train_class(cfg, ctx, run, data, class_id, fault, advance))
        except Exception as exc:
            raise ClassFailure(class_id, exc) from exc
    return results
