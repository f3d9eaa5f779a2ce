"""The run directory: creating it safely, and the files every run writes. `RunDir` is the one
place that names them; `open_run` creates or reopens one and holds its lock.

RUN/
  config.json       resolved TrainConfig of the last launch (+ format_version)
  dataset.json      what the data file held (class names, counts, resolution, channels, source)
  env.json          the last launch's environment (see env.py)
  launches.jsonl    a line per launch (time, ranks, resume, commit, precision)
  launches/NNN.json launch NNN's resolved config and environment, kept: a resume may change
                    the fields of config.RESUMABLE_FIELDS and run on other hosts and versions
  class_XXX/        checkpoint.pt (+ checkpoint.prev.pt), metrics.jsonl, samples_*.png, result.json
  summary.json      per task: rank, host, steps, train_s, core_s, gpu_s, imgs_per_s; for the job:
                    images, train_s (the slowest rank's: its tasks in turn), imgs_per_s; at the end
  evaluate-NETWORK.json  what `distcgan evaluate --run RUN` scored with that network
A run directory is never overwritten without --overwrite, and --overwrite deletes only a folder
that holds a distcgan config.json. While a job runs, its rank 0 holds RUN/.lock (flock), so a
second job on the same directory is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

from distcgan.config import TrainConfig, apply_overrides
from distcgan.errors import UserError, say
from distcgan.run.atomic import atomic_write_json, storage_errors

FORMAT_VERSION = 1
LOCK = ".lock"


@dataclass(frozen=True)
class TaskDir:
    """RUN/<task>/: one G/D pair's files (its checkpoints are named in checkpoint.py)."""

    path: Path

    @property
    def metrics(self) -> Path:
        """metrics.jsonl: one line per log step (step, losses, D's outputs, s_per_step)."""
        return self.path / "metrics.jsonl"

    @property
    def result(self) -> Path:
        """result.json: the task's summary line, written when it finishes."""
        return self.path / "result.json"

    def grid(self, step: int) -> Path:
        """The fixed-noise sample grid at `step`."""
        return self.path / f"samples_step{step:07d}.png"

    def grids(self) -> list[Path]:
        """Every sample grid written, in step order."""
        return sorted(self.path.glob("samples_step*.png"))


Status = Literal["done", "interrupted", "diverged", "not_started"]


@dataclass(frozen=True, kw_only=True)
class TaskRow:
    """One task's line of summary.json (and, once done, its result.json): where it trained and
    what it did. Every key is always there: a task that did not train in this launch (not
    started after a stop signal, or given up) has None for what it did not measure; `error`,
    written only when set, says why a task was given up."""

    class_id: int | None  # None for gan/cgan's one model of every class
    task: str
    name: str | None = None  # the class's name, or "N classes"
    status: Status
    rank: int  # the group's first rank
    ranks: list[int] | None = None
    host: str | None = None
    device_g: str | None = None
    device_d: str | None = None
    images: int | None = None  # real images of the task on one rank
    steps: int | None = None
    steps_this_launch: int | None = None
    effective_batch: int | None = None  # images per step over the group
    retries: int | None = None  # rollbacks after a non-finite loss
    time_up: bool | None = None  # with --time-limit-s: whether the time, not the steps, ended it
    train_s: float | None = None  # training seconds, every launch
    core_s: float | None = None  # each CPU launch's training seconds x the group's threads
    gpu_s: float | None = None  # each GPU launch's x the group's GPUs (Pair.core_s, .gpu_s)
    load_s: float | None = None
    # This launch's side work on the group's first rank, left out of train_s: seconds and count
    checkpoint_s: float | None = None
    checkpoints: int | None = None
    grid_s: float | None = None
    grids: int | None = None
    score_s: float | None = None  # --score-every's scores
    imgs_per_s: float | None = None
    error: str | None = None

    @property
    def trained(self) -> bool:
        """Whether this launch measured its training (steps and seconds are known)."""
        return self.train_s is not None

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if row["error"] is None:
            del row["error"]
        return row

    @staticmethod
    def from_dict(row: dict[str, Any]) -> TaskRow:
        """A row as summary.json holds it (rows of older versions lacked the keys of what they
        did not measure)."""
        values: dict[str, Any] = {f.name: row.get(f.name) for f in fields(TaskRow)}
        return TaskRow(**values)


def images_seen(row: TaskRow) -> int:
    """Images a task trained on, every launch: steps x its batch over the group."""
    return int(row.steps or 0) * int(row.effective_batch or 0)


def slowest_rank_s(rows: list[TaskRow]) -> float:
    """Training seconds of the slowest rank: a rank trains its tasks one after another, so its
    time is the sum of theirs (each task's seconds counted on every rank of its group; a fused
    group's seconds are shared equally among its classes, so they add up to its time)."""
    per_rank: dict[int, float] = {}
    for row in rows:
        for r in row.ranks or [row.rank]:
            per_rank[r] = per_rank.get(r, 0.0) + (row.train_s or 0.0)
    return max(per_rank.values(), default=0.0)


def job_speed(rows: list[TaskRow]) -> dict[str, float | int]:
    """The job's figures, each saying what it divides by: every task's images, the slowest
    rank's training seconds, and their ratio (the job's images/s while training, all ranks)."""
    images, train_s = sum(images_seen(r) for r in rows), slowest_rank_s(rows)
    return {
        "images": images,
        "train_s": round(train_s, 3),
        "imgs_per_s": round(images / train_s, 1) if train_s > 0 else 0.0,
    }


@dataclass(frozen=True)
class RunDir:
    """RUN/: the run directory's contract (layout in this module's docstring). Reads check each
    JSON file's format version; writes are atomic."""

    path: Path

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    @property
    def summary_file(self) -> Path:
        return self.path / "summary.json"

    @property
    def launches_file(self) -> Path:
        return self.path / "launches.jsonl"

    def has_env(self) -> bool:
        return (self.path / "env.json").is_file()

    def tasks(self) -> list[TaskDir]:
        """The task folders that have logged metrics, by name."""
        found = (TaskDir(p) for p in sorted(self.path.iterdir()) if p.is_dir())
        return [t for t in found if t.metrics.is_file()]

    def is_run(self) -> bool:
        """Whether a distcgan run was started here (it has a config.json, not an export's)."""
        return self.config_file.is_file() and not self.is_export()

    def is_export(self) -> bool:
        """Whether this is a distcgan export (distcgan export --out), which no run command takes."""
        return _is_export(self.config_file)

    def tensorboard(self, name: str) -> Path:
        """RUN/tb/<task>/: the task's TensorBoard events (`tensorboard --logdir RUN/tb`)."""
        return self.path / "tb" / name

    def task(self, name: str) -> TaskDir:
        return TaskDir(self.path / name)

    def read_config(self) -> TrainConfig:
        return read_config_file(self.config_file)

    def write_config(self, cfg: TrainConfig) -> None:
        write_json(self.config_file, cfg.to_dict())

    def read_dataset(self) -> dict[str, Any]:
        """What the data file held when the run started (class names, counts...)."""
        return read_json(self.path / "dataset.json", "run")

    def write_dataset(self, dataset: dict[str, Any]) -> None:
        write_json(self.path / "dataset.json", dataset)

    def read_env(self) -> dict[str, Any]:
        """The environment of the run's last launch (versions, hosts, ranks' devices...)."""
        return read_json(self.path / "env.json", "run")

    def write_env(self, env: dict[str, Any]) -> None:
        write_json(self.path / "env.json", env)

    def launch_record(self, number: int) -> Path:
        """launches/NNN.json: launch NNN's resolved config and environment."""
        return self.path / "launches" / f"{number:03d}.json"

    def write_launch_record(self, number: int, cfg: TrainConfig, env: dict[str, Any]) -> None:
        """Keep launch `number`'s config and environment, which the next launch's config.json
        and env.json replace."""
        path = self.launch_record(number)
        with storage_errors(path.parent):
            path.parent.mkdir(exist_ok=True)
        write_json(path, {"launch": number, "config": cfg.to_dict(), "env": env})

    def append_launch(self, launch: dict[str, Any]) -> int:
        """Add this launch's line to launches.jsonl; returns its number (1 for the first)."""
        append_jsonl(self.launches_file, launch)
        return self.count_launches()

    def precisions(self) -> str:
        """The precisions (--amp) the run trained in, in launch order, each once: "off",
        "bf16", or "off, then bf16" for a run resumed in another precision; "" where nothing
        says. From launches.jsonl, whose lines say since 2026-11-28; for an older line,
        config.json's (its last launch's, right wherever the run was never resumed in another).
        A damaged config.json or a cut last line is passed over: this reads a record, it does
        not check one."""
        try:
            last = json.loads(self.config_file.read_text()).get("amp")
        except (OSError, ValueError, AttributeError):
            last = None
        seen: list[str] = []
        for launch in read_jsonl(self.launches_file):
            amp = launch.get("amp", last) if isinstance(launch, dict) else None
            if amp:
                seen.append(str(amp))
        if not seen and last:
            seen = [str(last)]
        return ", then ".join(dict.fromkeys(seen))

    def count_launches(self) -> int:
        """How many launches have started here (lines of launches.jsonl; 0 if none)."""
        try:
            text = self.launches_file.read_text()
        except FileNotFoundError:
            return 0
        return sum(1 for line in text.splitlines() if line.strip())

    def evaluation(self, network_tag: str) -> Path:
        """evaluate-NETWORK.json: `distcgan evaluate`'s result with that network (its tag:
        inception-v3, inception-v3-tf, or a TorchScript file's stem)."""
        return self.path / f"evaluate-{network_tag}.json"

    def evaluations(self) -> list[Path]:
        """Every evaluate-NETWORK.json here, the newest last."""
        return sorted(self.path.glob("evaluate-*.json"), key=lambda f: f.stat().st_mtime)

    def has_summary(self) -> bool:
        return self.summary_file.is_file()

    def read_summary(self) -> dict[str, Any]:
        """summary.json, written by rank 0 at the end of a launch (format version checked)."""
        return read_json(self.summary_file, "run")

    def write_summary(self, summary: dict[str, Any]) -> None:
        """summary.json: the launch's figures, and under "classes" one TaskRow per task."""
        rows = summary["classes"]
        write_json(self.summary_file, {**summary, "classes": [r.to_dict() for r in rows]})

    def summary_rows(self) -> list[TaskRow]:
        """summary.json's rows, one per task."""
        return [TaskRow.from_dict(c) for c in self.read_summary()["classes"]]


@contextlib.contextmanager
def open_run(run: Path, resume: bool, overwrite: bool) -> Iterator[RunDir]:
    """Rank 0: check, lock and create (or reopen) `run`, holding RUN/.lock until the block ends."""
    fd = prepare(run, resume=resume, overwrite=overwrite)
    try:
        yield RunDir(run)
    finally:
        if fd is not None:
            os.close(fd)


def prepare(run: Path, resume: bool, overwrite: bool) -> int | None:
    """Check, lock and create `run` for a new or resumed run (rank 0 only).

    Returns the file descriptor that holds RUN/.lock for the rest of the job (None where the
    file system does not support locks).
    """
    if resume and overwrite:
        raise UserError("--resume and --overwrite contradict each other: pass one of them")
    if _is_export(run / "config.json"):  # --overwrite deleted it, and --resume read it as a run
        raise UserError(
            f"{run} is a distcgan export, not a run directory: refusing to train in it; choose "
            "another --run"
        )
    exists = run.exists() and (not run.is_dir() or any(run.iterdir()))
    if resume:
        if not RunDir(run).is_run():
            raise UserError(
                f"nothing to resume: {run} has no config.json (start it without --resume)"
            )
        fd = lock(run)
        remove_partial_writes(run)  # only once the lock says no other job is writing here
        return fd
    if exists:
        if not overwrite:
            raise UserError(
                f"run directory {run} already exists: pass --resume to continue it, --overwrite "
                "to replace it, or choose another --run"
            )
        if not RunDir(run).is_run():
            raise UserError(
                f"{run} exists but is not a distcgan run directory (no config.json): refusing to "
                "delete it with --overwrite; choose another --run"
            )
        fd = lock(run)  # never delete a directory that a running job is using
        for entry in run.iterdir():
            if entry.name != LOCK:
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        return fd
    with storage_errors(run):
        run.mkdir(parents=True, exist_ok=True)
    return lock(run)


def remove_partial_writes(run: Path) -> list[Path]:
    """Delete the temporary files of writes that a killed launch left unfinished (atomic.py's
    `.NAME.XXXX.tmp`, in RUN and its task folders); the files they were to replace are intact.
    Call it only while holding RUN/.lock."""
    removed = []
    for folder in (run, *(p for p in run.iterdir() if p.is_dir())):
        for tmp in folder.glob(".*.tmp"):
            with storage_errors(tmp):
                tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def lock(run: Path) -> int | None:
    """Take RUN/.lock with flock(2): a second job on the same run directory is refused, and the
    lock dies with its owner (a crashed or killed job never leaves a stale lock behind)."""
    path = run / LOCK
    with storage_errors(path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        owner = os.read(fd, 512).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise UserError(
            f"run directory {run} is in use by another job ({owner}): wait for it to end or "
            "choose another --run"
        ) from None
    except OSError as exc:  # e.g. ENOLCK on a file system mounted without lock support
        os.close(fd)
        say(
            f"distcgan: warning: cannot lock {path} ({exc.strerror}); nothing stops a second "
            "job from using this run directory"
        )
        return None
    os.ftruncate(fd, 0)
    job = os.environ.get("LSB_JOBID") or os.environ.get("SLURM_JOB_ID") or "-"
    os.write(fd, f"host {socket.gethostname()} pid {os.getpid()} job {job}\n".encode())
    return fd


def read_jsonl(path: Path) -> list[Any]:
    """A JSON-lines file's records (launches.jsonl, metrics.jsonl), passing over a line cut short
    by a crash or a full disk (append_jsonl ends such a line before the next record, so the
    records after it are kept); [] if there is no file."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short
    return rows


def append_jsonl(path: Path, record: Any) -> None:
    """Add `record` as one line of the JSON-lines file `path`, in one write. A last line without
    its newline (a write cut short by a full disk, or a crash) is ended first: appended to, it
    would have joined the new record into one line that parses as neither."""
    line = (json.dumps(record) + "\n").encode()
    with storage_errors(path), open(path, "ab+") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end:
            fh.seek(end - 1)
            if fh.read(1) != b"\n":
                line = b"\n" + line
        fh.write(line)


def read_json(path: Path, what: str) -> dict[str, Any]:
    """Read one of the run directory's JSON files, checking its format version."""
    if not path.is_file():
        raise UserError(f"{path} is missing: is {path.parent} a distcgan run directory?")
    try:
        obj = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path} is damaged ({exc}); restore it or start a new run") from exc
    version = obj.get("format_version")
    if version != FORMAT_VERSION:
        raise UserError(
            f"{path} has format_version {version}, but this distcgan reads {FORMAT_VERSION}: "
            f"the {what} was written by an incompatible version; use that version or start a "
            "new run"
        )
    return obj


def write_json(path: Path, obj: dict[str, Any]) -> None:
    atomic_write_json(path, {"format_version": FORMAT_VERSION, **obj})


def read_config_file(path: Path) -> TrainConfig:
    """A config written by `write_json(path, cfg.to_dict())` (RUN/config.json, compare's
    compare-config.json)."""
    if _is_export(path):
        raise UserError(
            f"{path.parent} is a distcgan export, not a run directory: draw from it with "
            f"distcgan generate --model {path.parent}, or give the run it was exported from"
        )
    obj = read_json(path, "run")
    obj.pop("format_version")
    return apply_overrides(TrainConfig(), obj, where=str(path))


def _is_export(config_file: Path) -> bool:
    """Whether `config_file` is a distcgan export's config.json (export/checksum.py's FORMAT), whose
    keys read as a run's gave "unknown key 'architecture'" and the 40 keys of a run."""
    try:
        obj = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and obj.get("format") == "distcgan-generator"


def read_config(run: Path) -> TrainConfig:
    """The config stored in RUN/config.json."""
    return RunDir(run).read_config()
