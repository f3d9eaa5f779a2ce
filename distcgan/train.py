"""Per-class DC-GAN training: one independent G/D pair per class, no communication while training.

`train_class` is the whole loop for one class, readable top to bottom: load the class's rows,
build (or restore) G and D, then D step, G step, log / checkpoint / sample, with two ways out:
a scheduler's stop signal (checkpoint, then stop) and a non-finite loss (roll back to the last
good checkpoint and retry with a new noise seed, up to `max_retries` times). `train_rank` runs a
rank's classes one after another. Leaves out: data-parallel training of one class over several
ranks (a later issue).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from distcgan import checkpoint
from distcgan.atomic import storage_errors
from distcgan.config import TrainConfig
from distcgan.data import DatasetInfo, load_class
from distcgan.dist import RankContext
from distcgan.errors import ClassFailure, UserError
from distcgan.faults import Fault
from distcgan.images import grid_scale, save_grid, to_float, to_uint8
from distcgan.models import Discriminator, Generator, init_weights
from distcgan.plan import class_seed
from distcgan.rundir import class_dir, write_json
from distcgan.signals import StopRequest

N_FIXED = 64  # fixed-noise images in each sample grid (8 x 8)


class DivergedError(UserError):
    """A class's loss stayed non-finite after every allowed retry."""


def log_event(ctx: RankContext, event: str, **fields: Any) -> None:
    """One JSON line on stdout per event, tagged with the rank, flushed at once.

    One write call per line: the launcher merges every rank's stdout, and a line written in
    pieces (as print() does) can be interleaved with another rank's.
    """
    sys.stdout.write(json.dumps({"rank": ctx.rank, "event": event, **fields}) + "\n")
    sys.stdout.flush()


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


# ---- one class's G/D pair and everything a checkpoint must hold to continue it exactly -------


@dataclass
class Pair:
    G: Generator
    D: Discriminator
    opt_g: torch.optim.Adam
    opt_d: torch.optim.Adam
    noise: torch.Generator  # z for every step (on the CPU: the same numbers on any device)
    G_ema: Generator | None = None  # moving average of G's weights: what samples come from
    step: int = 0
    train_s: float = 0.0  # training seconds so far, all launches
    retries: int = 0  # rollbacks after a non-finite loss


def new_pair(cfg: TrainConfig, channels: int, class_id: int, dev_g: str, dev_d: str) -> Pair:
    """A freshly initialised pair, from the class's own seeds (never the rank's)."""
    torch.manual_seed(class_seed(cfg.seed, class_id, "init"))  # init, then D's dropout masks
    fmt = torch.channels_last if cfg.channels_last else torch.contiguous_format
    G = Generator(cfg.z_dim, channels, cfg.resolution).apply(init_weights)
    D = Discriminator(channels, cfg.resolution).apply(init_weights)
    G, D = G.to(dev_g, memory_format=fmt), D.to(dev_d, memory_format=fmt)

    def adam(net: torch.nn.Module, lr: float, dev: str) -> torch.optim.Adam:
        # One fused kernel per step on the GPU instead of a loop of small ones.
        fused = dev.startswith("cuda")
        return torch.optim.Adam(
            net.parameters(), lr=lr, betas=(cfg.beta1, cfg.beta2), fused=fused or None
        )

    G_ema = copy.deepcopy(G).eval().requires_grad_(False) if cfg.ema_decay > 0 else None
    return Pair(
        G=G,
        D=D,
        G_ema=G_ema,
        opt_g=adam(G, cfg.lr_g, dev_g),
        opt_d=adam(D, cfg.lr_d, dev_d),
        noise=torch.Generator().manual_seed(class_seed(cfg.seed, class_id, "noise")),
    )


def pair_state(pair: Pair, class_id: int, arch: list[int]) -> dict[str, Any]:
    devices = {str(p.device) for p in (*pair.G.parameters(), *pair.D.parameters())}
    cuda = {d: torch.cuda.get_rng_state(d) for d in devices if d.startswith("cuda")}
    return {
        "class_id": class_id,
        "arch": arch,
        "step": pair.step,
        "train_s": pair.train_s,
        "retries": pair.retries,
        "G": pair.G.state_dict(),
        "D": pair.D.state_dict(),
        **({"G_ema": pair.G_ema.state_dict()} if pair.G_ema is not None else {}),
        "opt_g": pair.opt_g.state_dict(),
        "opt_d": pair.opt_d.state_dict(),
        "rng": {"cpu": torch.get_rng_state(), "cuda": cuda, "noise": pair.noise.get_state()},
    }


def restore_pair(pair: Pair, state: dict[str, Any]) -> None:
    pair.G.load_state_dict(state["G"])
    pair.D.load_state_dict(state["D"])
    if pair.G_ema is not None:
        pair.G_ema.load_state_dict(state.get("G_ema", state["G"]))
    pair.opt_g.load_state_dict(state["opt_g"])
    pair.opt_d.load_state_dict(state["opt_d"])
    torch.set_rng_state(state["rng"]["cpu"])
    for dev, rng in state["rng"]["cuda"].items():
        torch.cuda.set_rng_state(rng, dev)
    pair.noise.set_state(state["rng"]["noise"])
    pair.step, pair.train_s = int(state["step"]), float(state["train_s"])
    pair.retries = int(state.get("retries", 0))


def load_pair(cfg: TrainConfig, ctx: RankContext, cdir: Path, channels: int, class_id: int) -> Pair:
    """The pair as of its newest intact checkpoint (damaged ones are skipped and logged), or new."""
    pair = new_pair(cfg, channels, class_id, ctx.device_g, ctx.device_d)
    state = checkpoint.load_latest(cdir, log=lambda msg: log_event(ctx, "warning", message=msg))
    if state is not None:
        arch = [cfg.z_dim, channels, cfg.resolution]
        if state["class_id"] != class_id or list(state["arch"]) != arch:
            raise UserError(
                f"checkpoint in {cdir} is for class {state['class_id']} with (z_dim, channels, "
                f"resolution) {list(state['arch'])}, not class {class_id} with {arch}"
            )
        restore_pair(pair, state)
    return pair


# ---- the loop ---------------------------------------------------------------------------------


def train_class(
    cfg: TrainConfig,
    ctx: RankContext,
    run: Path,
    data: DatasetInfo,
    class_id: int,
    fault: Fault | None = None,
    stop: StopRequest | None = None,
    advance: Callable[[int], object] = lambda n: None,
) -> dict[str, Any]:
    """Train the G/D pair of one class up to cfg.steps, resuming from its checkpoint if any.

    Returns the class's summary row; its "status" is "done", or "interrupted" when a stop signal
    arrived (a checkpoint was written first). Raises DivergedError when the loss stays
    non-finite after cfg.max_retries rollbacks.
    """
    dev_g, dev_d = ctx.device_g, ctx.device_d
    cdir = class_dir(run, class_id)
    with storage_errors(cdir):
        cdir.mkdir(exist_ok=True)
    metrics_path = cdir / "metrics.jsonl"
    arch = [cfg.z_dim, data.channels, cfg.resolution]

    # ---- load this class's rows only, onto D's device, as floats in [-1, 1] -----------------
    t0 = time.perf_counter()
    real_all = to_float(load_class(cfg.data, class_id), dev_d)
    if cfg.channels_last:
        real_all = real_all.contiguous(memory_format=torch.channels_last)
    n_real = real_all.shape[0]
    _sync(dev_d)
    load_s = time.perf_counter() - t0

    # ---- build G and D, or restore them (weights, Adam, every RNG) from the last checkpoint ---
    pair = load_pair(cfg, ctx, cdir, data.channels, class_id)
    start = pair.step
    _truncate_metrics(metrics_path, pair.step)
    if pair.step >= cfg.steps:  # finished in an earlier launch: not retrained
        advance(cfg.steps)
        return _result(cfg, ctx, data, class_id, n_real, pair, 0, load_s, "done")
    log_event(
        ctx,
        "class_start",
        class_id=class_id,
        name=data.class_names[class_id],
        images=n_real,
        start_step=pair.step,
        steps=cfg.steps,
        device_g=dev_g,
        device_d=dev_d,
    )
    advance(pair.step)
    fixed_gen = torch.Generator().manual_seed(class_seed(cfg.seed, class_id, "fixed"))
    z_fixed = torch.randn(N_FIXED, cfg.z_dim, generator=fixed_gen).to(dev_g)
    data_seed = class_seed(cfg.seed, class_id, "data")

    def save_checkpoint() -> None:
        failing = fault is not None and fault.kind == "enospc" and fault.hits(class_id, pair.step)
        checkpoint.save(cdir, pair_state(pair, class_id, arch), _fail=fault if failing else None)

    def save_samples() -> None:
        G = pair.G_ema if pair.G_ema is not None else pair.G
        G.eval()  # BatchNorm from running statistics: a grid does not depend on its batch
        with torch.no_grad():
            imgs = to_uint8(G(z_fixed))
        pair.G.train()
        side = int(math.sqrt(N_FIXED))
        grid = imgs.reshape(side, side, *imgs.shape[1:])
        save_grid(cdir / f"samples_step{pair.step:07d}.png", grid, grid_scale(cfg.resolution))

    # ---- the training steps -------------------------------------------------------------------
    B = cfg.batch_size
    joint = cfg.d_batch == "joint"
    amp = cfg.amp == "bf16"
    targets = (torch.ones(B, 1, device=dev_d), torch.zeros(B, 1, device=dev_d))
    sums = torch.zeros(4, device=dev_d)  # loss_d, loss_g, D(x), D(G(z)) summed over an interval
    n_sum, status = 0, "done"
    _sync(dev_g, dev_d)
    tick = time.perf_counter()
    while pair.step < cfg.steps:
        if stop is not None and stop.requested:  # the scheduler's warning: checkpoint and stop
            _sync(dev_g, dev_d)
            pair.train_s += time.perf_counter() - tick
            save_checkpoint()
            log_event(
                ctx, "class_interrupted", class_id=class_id, step=pair.step, signal=stop.signal_name
            )
            status = "interrupted"
            break
        step = pair.step
        if fault is not None and fault.hits(class_id, step, pair.retries):
            if fault.kind in ("raise", "kill"):
                fault.fire()
        real = real_all[batch_indices(n_real, B, step, data_seed).to(dev_d)]
        z = torch.randn(B, cfg.z_dim, generator=pair.noise).to(dev_g)
        poison = (
            fault is not None
            and fault.kind.startswith("nan")
            and fault.hits(class_id, step, pair.retries)
        )
        sums += gan_step(pair, real, z, targets, joint, amp, poison, cfg.ema_decay)
        pair.step += 1
        n_sum += 1
        advance(1)
        done = pair.step
        if not (done % cfg.log_every == 0 or done % cfg.checkpoint_every == 0 or done == cfg.steps):
            continue
        _sync(dev_g, dev_d)
        now = time.perf_counter()
        pair.train_s += now - tick
        means = (sums / n_sum).tolist()
        sums.zero_()
        if not all(math.isfinite(v) for v in means):
            # Diverged: never checkpoint this state. Roll back to the last good checkpoint (or
            # the start) and retry with a new noise seed; other classes are not affected.
            if pair.retries >= cfg.max_retries:
                raise DivergedError(
                    f"class {class_id} diverged: loss not finite by step {done} (loss_d="
                    f"{means[0]}, loss_g={means[1]}) after {pair.retries} rollback(s); rerun "
                    "with --resume and a lower --lr-d/--lr-g, or raise --max-retries"
                )
            retries = pair.retries + 1
            pair = load_pair(cfg, ctx, cdir, data.channels, class_id)
            pair.retries = retries
            pair.noise.manual_seed(class_seed(cfg.seed, class_id, "noise", retry=retries))
            log_event(
                ctx,
                "rollback",
                class_id=class_id,
                diverged_at=done,
                back_to=pair.step,
                retry=retries,
            )
            _truncate_metrics(metrics_path, pair.step)
            advance(pair.step - done)
            n_sum = 0
            tick = time.perf_counter()
            continue
        _append_metrics(
            metrics_path,
            {
                "step": done,
                "loss_d": means[0],
                "loss_g": means[1],
                "d_real": means[2],
                "d_fake": means[3],
                "s_per_step": (now - tick) / n_sum,
            },
        )
        n_sum = 0
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            save_checkpoint()
        if (cfg.sample_every and done % cfg.sample_every == 0) or done == cfg.steps:
            save_samples()
        tick = time.perf_counter()  # checkpoint and grid time is not training time

    result = _result(cfg, ctx, data, class_id, n_real, pair, pair.step - start, load_s, status)
    if status == "done":
        write_json(cdir / "result.json", result)
        log_event(
            ctx,
            "class_done",
            class_id=class_id,
            steps=pair.step,
            train_s=result["train_s"],
            imgs_per_s=result["imgs_per_s"],
        )
    return result


def gan_step(
    pair: Pair,
    real: torch.Tensor,
    z: torch.Tensor,
    targets: tuple[torch.Tensor, torch.Tensor],
    joint: bool,
    amp: bool = False,
    poison: bool = False,
    ema_decay: float = 0.0,
) -> torch.Tensor:
    """One training step of a pair: a D update, then a G update (then G's moving average).

    Returns (loss_d, loss_g, mean D(x), mean D(G(z))) as one tensor on D's device, without
    waiting for the device (the caller decides when to look). `poison` makes loss_d NaN (tests).
    """
    G, D = pair.G, pair.D
    ones, zeros = targets
    dev_d = ones.device
    cast = torch.autocast(dev_d.type, dtype=torch.bfloat16, enabled=amp)
    # G runs on its device; the fakes cross to D's device inside one autograd graph.
    with cast:
        fake = G(z).to(dev_d)
        # D step: real -> 1, fake -> 0. `detach` stops this backward at D's input.
        logits_real, logits_fake = _d_logits(D, real, fake.detach(), joint)
    loss_d = 0.5 * (
        F.binary_cross_entropy_with_logits(logits_real.float(), ones)
        + F.binary_cross_entropy_with_logits(logits_fake.float(), zeros)
    )
    if poison:
        loss_d = loss_d * float("nan")
    pair.opt_d.zero_grad(set_to_none=True)
    loss_d.backward()
    pair.opt_d.step()

    # G step: the non-saturating loss -log D(G(z)), through the updated D. D's weights are
    # frozen for it so that this backward computes only what G needs.
    D.requires_grad_(False)
    with cast:
        logits_g = _d_logits(D, real, fake, joint)[1] if joint else D(fake)
    loss_g = F.binary_cross_entropy_with_logits(logits_g.float(), ones)
    pair.opt_g.zero_grad(set_to_none=True)
    loss_g.backward()
    pair.opt_g.step()
    D.requires_grad_(True)
    if pair.G_ema is not None:
        update_ema(pair.G_ema, G, ema_decay, pair.step)
    with torch.no_grad():
        return torch.stack(
            [
                loss_d.detach(),
                loss_g.detach(),
                torch.sigmoid(logits_real.float()).mean(),
                torch.sigmoid(logits_fake.float()).mean(),
            ]
        )


@torch.no_grad()
def update_ema(G_ema: Generator, G: Generator, decay: float, step: int) -> None:
    """G_ema <- decay * G_ema + (1 - decay) * G, with the decay warmed up over the first steps
    (min(decay, (1+t)/(10+t))) so that short runs are not averaged over their noisy start."""
    d = min(decay, (1 + step) / (10 + step))
    torch._foreach_lerp_(list(G_ema.parameters()), list(G.parameters()), 1.0 - d)
    for b_ema, b in zip(G_ema.buffers(), G.buffers()):  # BatchNorm statistics: G's own
        b_ema.copy_(b)


def _result(
    cfg: TrainConfig,
    ctx: RankContext,
    data: DatasetInfo,
    class_id: int,
    n_real: int,
    pair: Pair,
    steps_this_launch: int,
    load_s: float,
    status: str,
) -> dict[str, Any]:
    """One class's line of summary.json; images/s over all its steps, every launch included."""
    return {
        "class_id": class_id,
        "name": data.class_names[class_id],
        "status": status,
        "rank": ctx.rank,
        "host": ctx.host,
        "device_g": ctx.device_g,
        "device_d": ctx.device_d,
        "images": n_real,
        "steps": pair.step,
        "steps_this_launch": steps_this_launch,
        "retries": pair.retries,
        "train_s": round(pair.train_s, 3),
        "load_s": round(load_s, 3),
        "imgs_per_s": round(pair.step * cfg.batch_size / max(pair.train_s, 1e-9), 1),
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


def _append_metrics(path: Path, line: dict[str, Any]) -> None:
    with storage_errors(path), open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past `step` (written after the checkpoint a run continues from)."""
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
        with storage_errors(path):
            path.write_text("".join(keep))


def train_rank(
    cfg: TrainConfig,
    ctx: RankContext,
    run: Path,
    data: DatasetInfo,
    fault: Fault | None,
    stop: StopRequest | None,
    advance: Callable[[int], object],
) -> list[dict[str, Any]]:
    """Train this rank's classes one after another (no communication).

    A class that diverges for good is reported (status "diverged") and the rank goes on with
    its other classes; any other error ends the job. After a stop signal, classes not yet
    started are reported as "not_started".
    """
    torch.set_num_threads(ctx.threads)
    results = []
    for class_id in ctx.class_ids:
        if stop is not None and stop.requested:
            results.append({"class_id": class_id, "status": "not_started", "rank": ctx.rank})
            continue
        try:
            results.append(train_class(cfg, ctx, run, data, class_id, fault, stop, advance))
        except DivergedError as exc:
            log_event(ctx, "class_failed", class_id=class_id, message=str(exc))
            results.append(
                {
                    "class_id": class_id,
                    "status": "diverged",
                    "rank": ctx.rank,
                    "host": ctx.host,
                    "error": str(exc),
                }
            )
        except Exception as exc:
            raise ClassFailure(class_id, exc) from exc
    return results
