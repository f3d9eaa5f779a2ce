"""A task's files while it trains: metrics.jsonl, its checkpoints, its sample grids and
result.json, and when each is due.

Every method that writes is called by every rank of the task's group (the checkpoint averages
BatchNorm statistics over the group first: a collective); only the group's first rank writes.
With a TensorBoard directory, the metrics and grids also go to TensorBoard events there, through
one writer opened at the task's first write and closed by close() (file handles stay bounded
however many classes a rank trains).
Leaves out: the file names (run/rundir.py, run/checkpoint.py) and what a checkpoint holds
(pair.py).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import torch

from distcgan.config import TrainConfig
from distcgan.images import grid_canvas, grid_scale, save_grid, to_uint8
from distcgan.mpi.context import TrainGroup
from distcgan.run import checkpoint
from distcgan.run.atomic import atomic_write_bytes, storage_errors
from distcgan.run.rundir import TaskDir, append_jsonl, write_json
from distcgan.train.groupbn import average_buffers
from distcgan.train.pair import Pair, PairSpec, cpu_cache, pair_state

NOT_CURVES = ("step", "rank", "time_unix")  # numbers in a metrics line that are no curve
N_FIXED = 64  # fixed-noise images in each sample grid (8 x 8)
# How a pair's training ends early at a step: its --time-limit-s spent, or a stop asked for
# (a signal to this rank or a peer); None: it does not.
End = Literal["time_up", "stop"] | None


class TaskFiles:
    """RUN/<task>/ as the training loop sees it."""

    def __init__(
        self, tdir: TaskDir, cfg: TrainConfig, group: TrainGroup, tb_dir: Path | None = None
    ) -> None:
        self.dir, self.cfg, self.group = tdir, cfg, group
        self.tb_dir = tb_dir if group.lead else None
        self._tb: Any = None  # the SummaryWriter while the task trains
        self._tb_from = 0  # the step the events continue from (later ones are purged)
        if group.lead:
            with storage_errors(tdir.path):
                tdir.path.mkdir(exist_ok=True)

    # ---- when -----------------------------------------------------------------------------

    def log_due(self, step: int) -> bool:
        """A log step: metrics are reduced and written, the loss checked, the ranks in step."""
        cfg = self.cfg
        return step % cfg.log_every == 0 or step % cfg.checkpoint_every == 0 or step == cfg.steps

    def checkpoint_due(self, step: int, end: End = None, sums: torch.Tensor | None = None) -> bool:
        """A checkpoint every checkpoint_every steps and at the last, and where the pair ends
        early (`end`): its time up, or a stop asked for. A rank alone stops between log steps,
        where its losses (`sums`, the interval's so far) are not checked: weights whose loss
        went non-finite since the last check are not checkpointed, so that --resume goes back
        to the last good checkpoint (and diverges and rolls back as a straight run would)."""
        if end == "time_up" or step % self.cfg.checkpoint_every == 0 or step == self.cfg.steps:
            return True
        return end == "stop" and (sums is None or bool(torch.isfinite(sums).all()))

    def grid_due(self, step: int, end: End = None) -> bool:
        """A sample grid is drawn at log steps only, every sample_every steps and at the end
        (the last step, or a time up)."""
        every = self.cfg.sample_every
        if end == "time_up":
            return True
        return self.log_due(step) and ((every and step % every == 0) or step == self.cfg.steps)

    # ---- what -------------------------------------------------------------------------------

    def append_metrics(self, line: dict[str, Any]) -> None:
        if self.group.lead:
            append_jsonl(self.dir.metrics, line)
        tb = self._writer()
        if tb is not None:
            for key, value in line.items():
                if key not in NOT_CURVES and isinstance(value, (int, float)):
                    tb.add_scalar(key, value, line["step"])

    def truncate_metrics(self, step: int) -> None:
        """Drop metric lines past `step` (written after the checkpoint a run continues from)."""
        self._tb_from = step
        self.close()  # a writer reopened after a rollback purges the events past `step`
        path = self.dir.metrics
        if not self.group.lead or not path.exists():
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
            with storage_errors(path):  # a crash here leaves the old file, never half of one
                atomic_write_bytes(path, "".join(keep).encode())

    def save_checkpoint(
        self, pair: Pair, spec: PairSpec, interval: dict[str, Any] | None = None
    ) -> None:
        """Collective over the group: the same BatchNorm statistics on every rank, then the
        first rank writes; `interval` is the log interval under way (Pair.interval), or None
        at a log step."""
        if self.group.size > 1:
            for net in (pair.G, pair.D, pair.G_ema):
                if net is not None:
                    average_buffers(net, self.group.pg)
        extra: dict[str, Any] = {} if interval is None else {"interval": interval}
        if pair.cache is not None and self.group.size > 1:  # async: every rank's own fakes
            parts = self.group.gather(cpu_cache(pair))
            extra["async_cache_ranks"] = parts
        if self.group.lead:
            checkpoint.save(self.dir.path, {**pair_state(pair, spec), **extra})

    def checkpoint_path(self) -> Path:
        """Where the next checkpoint goes (an injected fault writes there first)."""
        return self.dir.path / checkpoint.CURRENT

    def save_grid(self, pair: Pair, z: torch.Tensor, labels: torch.Tensor | None) -> None:
        """The fixed-noise grid of G's moving average (else G) at the pair's step."""
        if not self.group.lead:
            return
        G = pair.G_ema if pair.G_ema is not None else pair.G
        G.eval()  # BatchNorm from running statistics: a grid does not depend on its batch
        with torch.no_grad():
            imgs = to_uint8(G(z, labels))
        pair.G.train()
        side = int(math.sqrt(N_FIXED))
        grid = imgs.reshape(side, side, *imgs.shape[1:])
        save_grid(self.dir.grid(pair.step), grid, grid_scale(self.cfg.resolution))
        tb = self._writer()
        if tb is not None:
            tb.add_image("grid", grid_canvas(grid), pair.step, dataformats="HWC")

    def _writer(self) -> Any:
        """The task's SummaryWriter, opened at its first write. Its purge_step drops the events
        past the step this launch continues from (written before a crash or a rollback), so a
        resumed run continues the same curves without duplicate steps."""
        if self.tb_dir is None:
            return None
        if self._tb is None:
            # Imported on use: tensorboard takes seconds to import, and most runs write none.
            from torch.utils.tensorboard import SummaryWriter

            with storage_errors(self.tb_dir):
                self._tb = SummaryWriter(str(self.tb_dir), purge_step=self._tb_from + 1)
            if self.cfg.augment != "none":  # the policy beside its curve, augment_p
                text = f"policy {self.cfg.augment}, p {self.cfg.augment_p}"
                self._tb.add_text("augment", text, self._tb_from)
        return self._tb

    def close(self) -> None:
        """Close the TensorBoard writer (its file handle); a later write opens a new one."""
        if self._tb is not None:
            tb, self._tb = self._tb, None
            assert self.tb_dir is not None  # _writer opens one only when there is a tb_dir
            with storage_errors(self.tb_dir):
                tb.close()

    def write_result(self, result: dict[str, Any]) -> None:
        if self.group.lead:
            write_json(self.dir.result, result)
