"""Per-class pairs that start from a finished unconditional run (issue 81's `--init-from RUN`), and
D's lower blocks to freeze while they fine-tune (FreezeD, `--freeze-d N`).

A start is the final pair of a finished `distcgan train --mode gan` run: its task `all/`'s last
checkpoint (G, D and G's moving average; Adam's state stays behind, each class gets a fresh one).
Every class's pair loads the same weights, after `pair.new_pair` has drawn its own
initialisation from its own seeds, so the random streams that follow (D's dropout masks, noise,
batches) are those of a pair trained from scratch: a class's fine-tune stays the same on any
number of ranks, fused or alone.

An export (`distcgan export`) cannot serve as a start: it holds one generator's weights (G's
moving average where the run kept one), neither D nor the G that Adam was stepping, so
`read_start` refuses it and names the run it was exported from.
The training job reads the start once per launch on rank 0 (`read_checked_start`) and gives
every rank the same tensors (job.py); task.load_task_pair applies it to a pair at step 0 (a
class's first launch, and a rollback with no checkpoint yet) and freezes D's first N blocks on
every pair it makes (`freeze`). dataset.json records the start (`start_record`) so that a
--resume checks that its weights are still those the run started from (`check_same_start`).
A two-phase run (`--shared-steps S`) trains its own start: the shared phase is a gan run's pair
(`shared_config`) trained in the run's own task folder RUN/all/ by every rank of the job, and
its final weights (`read_shared_start`) start every class as --init-from's would.
Leaves out: the flags (config.py's init_from, freeze_d and shared_steps), and the job that
trains both phases (job.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from distcgan.config import TrainConfig
from distcgan.errors import UserError
from distcgan.plan import make_tasks
from distcgan.run import checkpoint
from distcgan.run.rundir import RunDir, TaskRow
from distcgan.train.models import Discriminator, Generator
from distcgan.train.pair import Pair

FLAG = "--init-from"
GAN_TASK = make_tasks("gan", (0,))[0].name  # "all/": the gan run's one pair


@dataclass(frozen=True)
class StartWeights:
    """The final weights of a finished gan run, on the CPU: what every class's pair starts from."""

    run: Path
    cfg: TrainConfig  # the gan run's config (its last launch's)
    channels: int  # of the images it trained on
    step: int  # the step the weights are from: the run's last
    G: dict[str, torch.Tensor]
    D: dict[str, torch.Tensor]
    G_ema: dict[str, torch.Tensor] | None  # None where the run kept no moving average


def read_start(run: str | Path) -> StartWeights:
    """The final G, D and G's moving average of the finished gan run `run`; refuses, in one line
    that names the run, an export, anything that is not a run, a run of another mode, and a run
    that has not finished (stopped, diverged, or with its final checkpoint damaged)."""
    rd = RunDir(Path(run))
    if rd.is_export():
        raise UserError(_export_message(rd))
    if not rd.path.is_dir():
        raise UserError(
            f"{FLAG} {rd.path} does not exist: give the run directory of a finished distcgan "
            "train --mode gan"
        )
    if not rd.is_run():
        raise UserError(
            f"{FLAG} {rd.path} is not a distcgan run directory (no config.json): give the run "
            "directory of a finished distcgan train --mode gan"
        )
    cfg = rd.read_config()
    if cfg.mode != "gan":
        raise UserError(
            f"{FLAG} {rd.path} is a --mode {cfg.mode} run; a per-class run starts from the one "
            f"unconditional pair of a --mode gan run: train one with {gan_command(cfg, rd.path)}"
        )
    row = _final_row(rd)
    assert row.steps is not None  # _final_row refuses a row without
    state = _final_state(
        rd, row.steps, f"{FLAG} {rd.path}", "start from another gan run, or train this one again"
    )
    return _weights(rd.path, cfg, int(rd.read_dataset()["channels"]), state)


def gan_command(cfg: TrainConfig, run: Path) -> str:
    """The command that trains a gan run a per-class run of `cfg` can start from."""
    new = shlex.quote(str(run.parent / f"{run.name}-gan"))
    return (
        f"python -m distcgan train --mode gan --preset {cfg.preset} --data "
        f"{shlex.quote(cfg.data)} --resolution {cfg.resolution} --z-dim {cfg.z_dim} "
        f"--d-bn-eps {cfg.d_bn_eps:g} --run {new}"
    )


def _export_message(rd: RunDir) -> str:
    """Why an export is no start, and the run directory to give instead (from its config.json)."""
    try:
        source = json.loads(rd.config_file.read_text())["run"]["path"]
    except (OSError, ValueError, KeyError, TypeError):
        source = None
    instead = f"{FLAG} {source}" if source else "the run directory it was exported from"
    return (
        f"{FLAG} {rd.path} is an export (distcgan export): it holds one generator and no "
        f"discriminator, and a fine-tune starts from both: give {instead}"
    )


def _final_row(rd: RunDir) -> TaskRow:
    """The gan task's row of summary.json, which says whether it finished."""
    resume = f"python -m distcgan train --run {rd.path} --resume"
    if not rd.has_summary():
        raise UserError(
            f"{FLAG} {rd.path} has not finished (no summary.json: its first launch did not "
            f"end): finish it with {resume}"
        )
    rows = [r for r in rd.summary_rows() if r.task == GAN_TASK]
    if not rows or rows[0].steps is None:
        raise UserError(
            f"{FLAG} {rd.path}: its summary.json has no trained {GAN_TASK}/ task: finish the run "
            f"with {resume}"
        )
    row = rows[0]
    if row.status == "diverged":
        raise UserError(
            f"{FLAG} {rd.path} diverged (its pair was given up after non-finite losses): start "
            "from another gan run"
        )
    if row.status != "done":
        raise UserError(
            f"{FLAG} {rd.path} has not finished ({row.status} at step {row.steps}): finish it "
            f"with {resume}"
        )
    return row


def _final_state(rd: RunDir, step: int, who: str, fix: str) -> dict:
    """The gan task's checkpoint at `step`, the step it finished at; refused in one line that
    begins with `who` and ends with `fix` where it is missing or damaged."""
    tdir = rd.task(GAN_TASK).path
    state = checkpoint.load_latest(tdir, log=lambda m: None)
    found = None if state is None else int(state["step"])
    if found != step:
        raise UserError(
            f"{who}: its final checkpoint (step {step}) in {tdir} is missing or damaged (the "
            f"newest intact one: {found if found is not None else 'none'}): {fix}"
        )
    assert state is not None  # its step is the one asked for
    return state


def _weights(run: Path, cfg: TrainConfig, channels: int, state: dict) -> StartWeights:
    return StartWeights(
        run=run,
        cfg=cfg,
        channels=channels,
        step=int(state["step"]),
        G=state["G"],
        D=state["D"],
        G_ema=state.get("G_ema"),
    )


# ---- the two-phase job (--shared-steps) ------------------------------------------------------


def shared_config(cfg: TrainConfig) -> TrainConfig:
    """The config of a two-phase run's shared phase (--shared-steps S): `cfg`'s, as a gan run of
    S steps (at most --shared-time-limit-s seconds) on the same classes, data and settings; what
    only a per-class fine-tune has (fusion, FreezeD) left out."""
    return dataclasses.replace(
        cfg,
        mode="gan",
        steps=cfg.shared_steps,
        time_limit_s=cfg.shared_time_limit_s,
        shared_steps=0,
        shared_time_limit_s=0.0,
        freeze_d=0,
        fuse="auto",
    )


def read_shared_start(run: Path, cfg: TrainConfig, channels: int, step: int) -> StartWeights:
    """Rank 0, once a two-phase run's shared phase is done (at `step`): its final G, D and G's
    moving average, in RUN/all/, that every class's fine-tune starts from."""
    rd = RunDir(run)
    again = f"python -m distcgan train --run {shlex.quote(str(run))} --overwrite"
    who = f"the shared phase of {run}"
    state = _final_state(rd, step, who, f"train the run again with {again}")
    return _weights(rd.task(GAN_TASK).path, shared_config(cfg), channels, state)


# ---- the start against the per-class run ---------------------------------------------------------


def check_start(start: StartWeights, cfg: TrainConfig, channels: int) -> None:
    """Refuse, in one line, a start that the per-class run of `cfg` on images of `channels`
    cannot load or should not: another mode, another resolution, channel count, z size, or D's
    BatchNorm eps (the same weights computing another function), or layers of another shape."""
    if cfg.mode != "per-class":
        raise UserError(
            f"{FLAG} starts the pairs of --mode per-class, not --mode {cfg.mode}: drop {FLAG}, "
            "or train with --mode per-class"
        )
    theirs, ours = start.cfg, cfg
    differ = [
        f"{what} {there} there, {here} here"
        for what, there, here in (
            ("resolution", f"{theirs.resolution} px", f"{ours.resolution} px"),
            ("channels", start.channels, channels),
            ("z_dim", theirs.z_dim, ours.z_dim),
            ("d_bn_eps", f"{theirs.d_bn_eps:g}", f"{ours.d_bn_eps:g}"),
        )
        if there != here
    ]
    if not differ:
        differ = _layer_differences(start, cfg, channels)
    if differ:
        raise UserError(
            f"{FLAG} {start.run} is a gan run of another architecture ({'; '.join(differ)}): "
            f"start from a gan run of this run's data and preset: {gan_command(cfg, start.run)}"
        )


def _layer_differences(start: StartWeights, cfg: TrainConfig, channels: int) -> list[str]:
    """Where the start's tensors differ in name or shape from a per-class pair's networks (a run
    of another version of models.py): the first few, said plainly."""
    with torch.device("meta"):  # shapes only: no memory, no random draws
        nets = {
            "G": Generator(cfg.z_dim, channels, cfg.resolution),
            "D": Discriminator(channels, cfg.resolution, 0, cfg.d_dropout, bn_eps=cfg.d_bn_eps),
        }
    differ = []
    for role, net in nets.items():
        have = {k: tuple(v.shape) for k, v in getattr(start, role).items()}
        want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        for name in sorted(have.keys() | want.keys()):
            if have.get(name) != want.get(name):
                differ.append(f"{role}.{name} {have.get(name)} there, {want.get(name)} here")
    return differ[:3]


def read_checked_start(cfg: TrainConfig, channels: int) -> StartWeights:
    """cfg.init_from's start, checked against the run of `cfg` on images of `channels`, and
    --freeze-d against D's depth (rank 0 calls it; job.py shares the answer)."""
    check_freeze_depth(cfg, channels)
    start = read_start(cfg.init_from)
    check_start(start, cfg, channels)
    return start


def check_freeze_depth(cfg: TrainConfig, channels: int) -> None:
    """Refuse, in one line, a --freeze-d beyond the depth of `cfg`'s D."""
    with torch.device("meta"):  # D's blocks only: no memory, no random draws
        D = Discriminator(channels, cfg.resolution, 0, cfg.d_dropout, bn_eps=cfg.d_bn_eps)
    frozen_d_parameters(D, cfg.freeze_d)  # refuses N beyond D's blocks


def start_digest(start: StartWeights) -> str:
    """SHA-256 over the start's tensors (G, D, G's moving average; names and bytes, in order):
    the same digest means the same weights."""
    h = hashlib.sha256()
    for role in ("G", "D", "G_ema"):
        state = getattr(start, role)
        for name, t in sorted((state or {}).items()):
            h.update(f"{role}.{name}".encode())
            h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def start_record(start: StartWeights) -> dict[str, object]:
    """What dataset.json keeps of the start under "start": the run, its step, its digest."""
    return {"run": str(start.run), "step": start.step, "sha256": start_digest(start)}


def check_same_start(run: Path, recorded: dict | None, start: StartWeights) -> None:
    """On --resume: refuse, in one line, a start whose weights are no longer those the run
    started from (the gan run trained on, or replaced); a run without a record passes."""
    if recorded is None or recorded.get("sha256") == start_digest(start):
        return
    again = shlex.quote(str(run.parent / f"{run.name}-2"))
    raise UserError(
        f"{FLAG} {start.run} now holds other weights (step {start.step}) than the run in {run} "
        f"started from (step {recorded.get('step')}): resume with the gan run as it was, or "
        f"train anew from this one: python -m distcgan train --config "
        f"{shlex.quote(str(run / 'config.json'))} --run {again}"
    )


def start_pair(pair: Pair, start: StartWeights) -> None:
    """A fresh pair (pair.new_pair) with the start's weights: G, D, G's moving average (G's
    weights where the gan run kept none), and under --schedule async D's copy; its Adam states,
    step, random streams and everything else stay the fresh pair's."""
    pair.G.load_state_dict(start.G)
    pair.D.load_state_dict(start.D)
    if pair.G_ema is not None:
        pair.G_ema.load_state_dict(start.G_ema if start.G_ema is not None else start.G)
    if pair.D_copy is not None:
        pair.D_copy.load_state_dict(start.D)


# ---- FreezeD ---------------------------------------------------------------------------------


def d_blocks(D: Discriminator) -> list[list[nn.Module]]:
    """D's blocks, input first: each starts at a convolution (models._d_block: convolution,
    LeakyReLU, dropout, BatchNorm but in the first); D's output layer (adv_layer) is none."""
    blocks: list[list[nn.Module]] = []
    for layer in D.model:
        if isinstance(layer, nn.Conv2d):
            blocks.append([])
        blocks[-1].append(layer)
    return blocks


def frozen_d_parameters(D: Discriminator, n: int) -> list[nn.Parameter]:
    """`--freeze-d N`: the parameters of D's first N blocks (convolution weights and biases,
    BatchNorm weights and biases), which a fine-tune keeps as the start left them (FreezeD: Mo et
    al., 2020). The same for a fused D, whose every parameter holds all its classes' (so all
    freeze alike). BatchNorm's running statistics are buffers, not parameters: they follow
    training as before. N = 0 freezes nothing; N beyond D's blocks is refused in one line."""
    blocks = d_blocks(D)
    if not 0 <= n <= len(blocks):
        raise UserError(
            f"--freeze-d {n} is beyond D's depth: D has {len(blocks)} blocks before its output "
            f"layer; freeze 0 (none) to {len(blocks)}"
        )
    return [p for block in blocks[:n] for layer in block for p in layer.parameters()]


def freeze(D: nn.Module, n: int) -> None:
    """`--freeze-d N` on D (a pair's, or a fused one's, before any DDP wrapper or CUDA graph is
    made of it): its first N blocks' parameters get no gradient, so Adam leaves them as they are
    and a group's gradient all-reduce leaves them out. Called on every pair a launch or a
    rollback makes (requires_grad is not in a checkpoint)."""
    assert isinstance(D, Discriminator)
    for p in frozen_d_parameters(D, n):
        p.requires_grad_(False)
