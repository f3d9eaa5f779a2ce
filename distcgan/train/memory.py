"""Memory said before it is spent: a rank's tasks at its batch (and fused groups) checked against
the memory the rank can use, before any image is loaded or any tensor made.

`--batch-size 100000` on 500-image classes once started training, grew past 10 GB per rank and
ended by the kernel's SIGKILL without a word from distcgan; on a shared node that endangers other
users' jobs. So, before training, each rank estimates the bytes its largest group of tasks needs
on each device (fused.class_bytes, the estimate --fuse auto fits to a GPU's free memory) and
compares them with what it may use: on a GPU its free memory, on the CPU the memory available to
the node (MemAvailable, or less where a cgroup limit leaves less, as under Slurm or a container)
divided among the node's ranks. A batch larger than a task's images is refused too: every step
would draw images more than once.

Leaves out: sampling and scoring (their own commands), and the memory the allocator wastes
(the estimate is of the tensors alone, so a refusal is sure and a pass is not a promise).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from distcgan.errors import UserError
from distcgan.train.fused import _free_bytes, class_bytes

CGROUP = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 60  # cgroup v1 says "no limit" as a number near 2**63


def meminfo_available(text: str) -> int | None:
    """MemAvailable of /proc/meminfo's text, in bytes (None where the kernel does not say)."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def cgroup_room(proc_cgroup: str, root: Path = CGROUP) -> int | None:
    """Bytes left under the tightest memory limit of this process's cgroup and its parents
    (`proc_cgroup`: /proc/self/cgroup's text): v2's memory.max - memory.current, v1's
    memory.limit_in_bytes - memory.usage_in_bytes; None where no level sets a limit."""
    rooms = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":  # v2, one unified hierarchy
            base, files = root, ("memory.max", "memory.current")
        elif "memory" in parts[1].split(","):
            base, files = root / "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        folder = base / parts[2].lstrip("/")
        for level in [folder, *folder.parents]:
            room = _level_room(level, *files)
            if room is not None:
                rooms.append(room)
            if level == base:
                break
    return min(rooms) if rooms else None


def _level_room(level: Path, limit_file: str, usage_file: str) -> int | None:
    try:
        limit = (level / limit_file).read_text().strip()
        usage = int((level / usage_file).read_text().strip())
    except (OSError, ValueError):
        return None  # not this cgroup's level (another namespace), or not readable
    if limit == "max" or not limit.isdigit() or int(limit) >= UNLIMITED:
        return None
    return max(0, int(limit) - usage)


def host_bytes() -> tuple[int | None, str]:
    """The memory this node's ranks may use together, and where the figure comes from."""
    try:
        available = meminfo_available(Path("/proc/meminfo").read_text())
        room = cgroup_room(Path("/proc/self/cgroup").read_text())
    except OSError:
        return None, ""
    if room is not None and (available is None or room < available):
        return room, "left under this job's cgroup memory limit"
    return available, "MemAvailable"


def device_bytes(device: str, local_size: int) -> tuple[int | None, str]:
    """What one rank may use on `device`: a GPU's free memory, or its share of the host's."""
    if device.startswith("cuda"):
        return _free_bytes(device), "its free memory"
    total, source = host_bytes()
    if total is None:
        return None, ""
    share = f", shared by {local_size} ranks on this node" if local_size > 1 else ""
    return total // max(1, local_size), f"{source} {total / 1e9:.1f} GB{share}"


def check_batch(cfg: Any, label: str, images: int, group_size: int) -> None:
    """Refuse a batch that draws more images a step than the task has."""
    drawn = cfg.micro_batch(group_size) * cfg.grad_accum * group_size
    if drawn > images:
        flag = "--global-batch-size" if cfg.global_batch_size else "--batch-size"
        asked = cfg.global_batch_size or cfg.batch_size
        raise UserError(
            f"{flag} {asked} draws {drawn} images a step but {label} has {images}: choose "
            f"{flag} {images} or less"
        )


def group_needs(
    cfg: Any, group: Sequence[Any], counts: Sequence[int], channels: int, group_size: int
) -> tuple[int, int]:
    """Bytes a group of tasks trained at once needs on G's device and on D's (fused.class_bytes
    at the rank's micro-batch and share of the images, once per task of the group)."""
    # One micro-batch is what is alive at once; the fields that would re-check it are cleared.
    micro = dataclasses.replace(
        cfg,
        batch_size=cfg.micro_batch(group_size),
        grad_accum=1,
        batch_size_d=0,
        global_batch_size=0,
    )
    shard = group_size if cfg.data_shard else 1
    g_total = d_total = 0
    for task in group:
        images = -(-sum(counts[k] for k in task.class_ids) // shard)
        g, d = class_bytes(micro, images, channels)
        g_total, d_total = g_total + g, d_total + d
    return g_total, d_total


def check_rank(cfg: Any, ctx: Any, data: Any, groups: Sequence[Sequence[Any]]) -> None:
    """Refuse, in one line, a rank's groups of tasks whose tensors would not fit the memory it
    can use on G's or D's device, then a batch larger than a task's images. Called on every
    rank (under agree) before anything is loaded; `groups` as rank.task_groups gives them."""
    limits = {dev: device_bytes(dev, ctx.local_size) for dev in {ctx.device_g, ctx.device_d}}
    for group in groups:
        g, d = group_needs(cfg, group, data.counts, data.channels, ctx.group.size)
        needs = {ctx.device_g: g}
        needs[ctx.device_d] = needs.get(ctx.device_d, 0) + d
        for device, need in needs.items():
            limit, source = limits[device]
            if limit is not None and need > limit:
                fit = (device, need, limit, source)
                raise UserError(_too_big(cfg, group, data, ctx.group.size, fit))
    for task in ctx.tasks:
        images = sum(data.counts[k] for k in task.class_ids)
        check_batch(cfg, task.label, images, ctx.group.size)


def _too_big(
    cfg: Any, group: Sequence[Any], data: Any, size: int, fit: tuple[str, int, int, str]
) -> str:
    """The refusal's line: what needs how much where, the limit and where it comes from, and
    what to lower."""
    device, need, limit, source = fit
    where = device if device.startswith("cuda") else "the CPU"
    if len(group) > 1:
        what = f"classes {','.join(str(t.class_id) for t in group)} fused (--fuse)"
        advice = "lower --fuse or --batch-size"
    else:
        what, advice = group[0].label, "lower --batch-size"
        images = sum(data.counts[k] for k in group[0].class_ids)
        if cfg.micro_batch(size) * cfg.grad_accum * size > images:
            advice += f" to {images} or less ({what} has {images} images)"
    batch, verb = cfg.global_batch_size or cfg.batch_size, "need" if len(group) > 1 else "needs"
    return (
        f"{what} at batch {batch} {verb} about {need / 1e9:,.1f} GB on {where}, more than the "
        f"{limit / 1e9:,.1f} GB this rank can use there ({source}): {advice}"
    )


def check_images(flag: str, value: int, images: int, image_bytes: int, local_size: int) -> None:
    """Refuse a sample count (`flag` `value`) whose uint8 images, `images` of `image_bytes` each
    held at once, would not fit the CPU memory this rank can use (sample, generate)."""
    need = images * image_bytes
    limit, source = device_bytes("cpu", local_size)
    if limit is not None and need > limit:
        raise UserError(
            f"{flag} {value} holds about {need / 1e9:,.1f} GB of images in memory at once, more "
            f"than the {limit / 1e9:,.1f} GB this rank can use ({source}): lower {flag}"
        )
