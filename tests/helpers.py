"""Helpers shared by the test modules (which import from here, never from each other; conftest.py
keeps the fixtures): running the command line alone or under mpiexec and reading its output, a
tiny classifier and sample files for evaluation, naive reference scores, and tiny files in each
real on-disk format that data_prep reads, written the way the datasets ship them: IDX bytes with
their magic numbers, CIFAR pickles (bytes keys, planar rows) in a folder or a .tar.gz,
downsampled-ImageNet npz batches, and folders of JPEG/PNG images in the modes real ImageNet has
(RGB, grayscale, CMYK, a PNG named .JPEG)."""

from __future__ import annotations

import functools
import gzip
import io
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import torch
from PIL import Image
from torch import nn

from distcgan.data import load_class, read_info, write_dataset
from distcgan.eval.metrics.networks import METADATA


def fresh_python(code: str) -> str:
    """What `code` prints in a fresh interpreter of this checkout (which modules a start loads,
    say), its exit checked."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def idx_bytes(array: np.ndarray) -> bytes:
    """An IDX file: 0, 0, 0x08 (unsigned byte), ndim, then the sizes (big-endian) and the data."""
    head = bytes([0, 0, 8, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return head + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_mnist(folder: Path, prefix: str, images: np.ndarray, labels: np.ndarray, gz: bool):
    folder.mkdir(parents=True, exist_ok=True)
    for kind, arr in (("images-idx3", images), ("labels-idx1", labels)):
        data = idx_bytes(arr)
        name = f"{prefix}-{kind}-ubyte"
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (folder / name).write_bytes(data)


def cifar_rows(images: np.ndarray) -> np.ndarray:
    """(n, 32, 32, 3) -> CIFAR's rows: 1024 red, 1024 green, 1024 blue values."""
    return np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(images.shape[0], 3072))


def _pickle(obj: dict) -> bytes:
    # The real files are Python 2 pickles: byte-string keys, protocol 2.
    return pickle.dumps({k.encode(): v for k, v in obj.items()}, protocol=2)


def write_cifar(
    root: Path, files: dict[str, dict], folder: str, archive: str | None, order=None
) -> Path:
    """Write `files` (name -> dict with str keys) as `root/folder/NAME`, or, with `archive`,
    as `root/archive` (a .tar.gz of `folder/NAME`, members in `order`). Returns --src."""
    blobs = {name: _pickle(obj) for name, obj in files.items()}
    if archive is None:
        (root / folder).mkdir(parents=True)
        for name, blob in blobs.items():
            (root / folder / name).write_bytes(blob)
        return root / folder
    path = root / archive
    with tarfile.open(path, "w:gz") as tar:
        for name in order or blobs:
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(blobs[name])
            tar.addfile(info, io.BytesIO(blobs[name]))
    return path


def write_npz(path: Path, images: np.ndarray, labels_1based, compressed: bool = False):
    """A downsampled-ImageNet batch: data (n, 3 S^2) planar RGB, labels 1-based, mean."""
    s = images.shape[1]
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2).reshape(images.shape[0], 3 * s * s))
    save = np.savez_compressed if compressed else np.savez
    save(path, data=data, labels=list(int(x) for x in labels_1based), mean=data.mean(axis=0))


def random_images(rng, n: int, side: int, channels: int = 3) -> np.ndarray:
    return rng.integers(0, 256, (n, side, side, channels), dtype=np.uint8)


def photo(rng, w: int, h: int) -> Image.Image:
    """A smooth random RGB picture (JPEG-friendly), w x h."""
    small = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
    return Image.fromarray(small, "RGB").resize((w, h), Image.Resampling.BICUBIC)


def save_as(img: Image.Image, path: Path, kind: str) -> None:
    """Save in one of the forms found in real ImageNet: rgb, gray or cmyk JPEG, or a PNG (the
    file's name may still say .JPEG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "rgb":
        img.save(path, "JPEG", quality=90)
    elif kind == "gray":
        img.convert("L").save(path, "JPEG", quality=90)
    elif kind == "cmyk":
        img.convert("CMYK").save(path, "JPEG", quality=90)
    elif kind == "png":
        img.save(path, "PNG")
    else:
        raise ValueError(kind)


WNIDS = ["n01440764", "n01443537", "n01484850", "n01491361", "n01494475"]
KINDS = ["rgb", "gray", "cmyk", "png", "rgb"]


def imagenet_train_folder(root, per_class=3, seed=0, scale=1):
    """An ILSVRC2012-like train folder of JPEGs (RGB, gray, CMYK, PNG named .JPEG), uneven
    classes, with LOC_synset_mapping.txt beside it."""
    rng = np.random.default_rng(seed)
    for k, wnid in enumerate(WNIDS):
        for i in range(per_class + k % 2):  # uneven classes
            img = photo(rng, scale * (50 + 13 * (i % 10)), scale * (40 + 7 * k))
            save_as(img, root / wnid / f"{wnid}_{i}.JPEG", KINDS[(k + i) % len(KINDS)])
    (root.parent / "LOC_synset_mapping.txt").write_text(
        "".join(f"{w} class number {k}\n" for k, w in enumerate(WNIDS))
    )
    return root


# ---- running the command line, alone or under mpiexec ----


REPO = Path(__file__).resolve().parent.parent


BIN = Path(sys.executable).parent


# The MPI launches (mpiexec, srun) the running test has made: conftest.py checks them against its
# `mpi` mark, which decides what runs again under each Open MPI (see the Makefile).
LAUNCHES: list[str] = []


def launches(what: str) -> None:
    """Record that the running test starts MPI jobs by a way other than mpiexec() (a job
    script, a stand-in scheduler)."""
    LAUNCHES.append(what)


def _find_mpiexec() -> str:
    local = BIN / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec: install the local-mpi extra (pip install -e '.[local-mpi]')")
    return found


def find_mpiexec() -> str:
    """The path of mpiexec() for an environment that may or may not launch (not recorded)."""
    return _find_mpiexec()


def mpiexec() -> str:
    """The mpiexec beside this Python (the venv's mpich), else the one on PATH, for a launch (the
    test is recorded as one that starts MPI jobs)."""
    found = _find_mpiexec()
    LAUNCHES.append(found)
    return found


def foreign_mpiexec() -> str:
    """An mpiexec of another MPI library than this Python's mpi4py: pip's MPICH (hydra) under an
    Open MPI, else Debian's Open MPI 4.1 (`make sysdeps`). A missing one skips the test, or
    fails it under CI=true."""
    if open_mpi():
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            found = str(distribution("mpich").locate_file("../../../bin/mpiexec"))
        except PackageNotFoundError:
            found = ""
        need = "pip's mpich (the local-mpi extra)"
    else:
        found = shutil.which("mpiexec.openmpi") or ""
        need = "Debian's Open MPI (openmpi-bin: make sysdeps)"
    if not found or not os.path.exists(found):
        if os.environ.get("CI") == "true":
            pytest.fail(f"no mpiexec of another MPI library: install {need}")
        pytest.skip(f"no mpiexec of another MPI library: install {need}")
    LAUNCHES.append(found)
    return found


@functools.cache
def open_mpi() -> bool:
    """Whether the mpiexec the tests launch is Open MPI's (else MPICH's hydra)."""
    out = subprocess.run([_find_mpiexec(), "--version"], capture_output=True, text=True, timeout=60)
    # Open MPI 5 says "mpiexec (Open MPI) 5.x" or names prterun; 4.1 says "mpiexec (OpenRTE) 4.1.4".
    said = out.stdout + out.stderr
    return any(name in said for name in ("Open MPI", "prterun", "OpenRTE"))


def run_cli(
    *args: str, ranks: int | None = None, timeout: float = 300, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run `distcgan ARGS` as a user would: one process, or `mpiexec -n RANKS python -m mpi4py`."""
    if ranks is None:
        cmd = [sys.executable, "-m", "distcgan", *args]
    else:
        cmd = [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


# ---- a read-only or full disk: a user and mount namespace of the test's own ----


def _userns() -> bool:
    """Whether unprivileged user and mount namespaces may be made (`unshare -rm`)."""
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


needs_userns = pytest.mark.skipif(not _userns(), reason="unshare -rm (user namespaces) refused")


def in_namespace(setup: str, after: str, cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `cmd` after the shell `setup` inside a new user+mount namespace; `after` runs there
    too (to copy results out of a mount that vanishes with the namespace). Returns cmd's rc."""
    script = f'{setup} || exit 99; "$@"; rc=$?; {after}; exit $rc'
    env = {"PYTHONPATH": str(REPO), "PATH": f"{sys.prefix}/bin:/usr/bin:/bin"}
    # Where this process finds its MPI library (a pip MPICH under another prefix), and a GPU
    # hidden from it stays hidden.
    kept = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES")
    env.update({k: os.environ[k] for k in kept if k in os.environ})
    # Open MPI will not start without a home directory, nor as root without its two variables.
    env["HOME"] = os.environ.get("HOME", str(REPO))
    env.update({k: v for k, v in os.environ.items() if k.startswith(("OMPI_", "PRTE_"))})
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, "sh", *cmd],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def imported_modules(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The modules Python said it imported (run with PYTHONPROFILEIMPORTTIME=1), taken out of
    result.stderr, which keeps the program's own lines."""
    lines = result.stderr.splitlines()
    result.stderr = "".join(f"{x}\n" for x in lines if not x.startswith("import time:"))
    return [x.split("|")[-1].strip() for x in lines if x.startswith("import time:")]


def tiny_args(data: Path, run: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--preset",
        "tiny",
        "--data",
        str(data),
        "--run",
        str(run),
        "--no-progress",
        *extra,
    ]


def cli_command(*args: str, ranks: int | None = None) -> list[str]:
    if ranks is None:
        return [sys.executable, "-m", "distcgan", *args]
    return [mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "distcgan", *args]


class Background:
    """A CLI run in the background whose JSON event lines can be waited for. It keeps the wall
    time of its launch, of its end (wait) and of each line it printed, for the tests that say
    how soon a job ends after a failure (ended_promptly)."""

    def __init__(
        self,
        *args: str,
        ranks: int | None = None,
        cmd: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        import queue
        import threading

        env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.launched = time.time()
        self.ended: float | None = None
        self.line_times: list[tuple[float, str]] = []  # (wall time, line), stdout and stderr
        self.proc = subprocess.Popen(
            cmd or cli_command(*args, ranks=ranks),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
            start_new_session=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []

        def pump(stream, sink, q=None):
            for line in stream:
                self.line_times.append((time.time(), line))
                sink.append(line)
                if q is not None:
                    q.put(line)

        self.pumps = [
            threading.Thread(
                target=pump, args=(self.proc.stdout, self.stdout, self.lines), daemon=True
            ),
            threading.Thread(target=pump, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for thread in self.pumps:
            thread.start()

    def wait_event(self, event: str, timeout: float = 120, **fields) -> dict:
        """Block until an event line with these fields appears on stdout."""
        import json
        import queue

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            if line.startswith('{"rank"'):
                obj = json.loads(line)
                if obj["event"] == event and all(obj.get(k) == v for k, v in fields.items()):
                    return obj
        raise AssertionError(f"no {event} {fields} event; stderr: {''.join(self.stderr)[-2000:]}")

    def wait(self, timeout: float = 120) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.ended = time.time()
        for thread in self.pumps:  # the pipes close when the last process that holds them ends
            thread.join(timeout=10)
        return rc

    def line_time(self, text: str) -> float:
        """When the first line that contains `text` arrived (stdout or stderr)."""
        for t, line in self.line_times:
            if text in line:
                return t
        raise AssertionError(f"no line with {text!r}; stderr: {''.join(self.stderr)[-2000:]}")

    def rank_pids(self) -> list[int]:
        """The training processes (under mpiexec and its proxy, which give them own sessions)."""
        pids = []
        for pid in descendants(self.proc.pid):
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"distcgan" in cmd and not cmd[0].endswith((b"mpiexec", b"hydra_pmi_proxy")):
                pids.append(pid)
        return pids

    def kill(self) -> None:
        """SIGKILL mpiexec and everything under it (no cleanup code runs anywhere)."""
        import signal

        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


def run_timed(
    *args: str, ranks: int | None = None, timeout: float = 120, cmd: list[str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Background]:
    """run_cli's run (or `cmd`'s), with its times kept (Background): the result, and the job."""
    job = Background(*args, ranks=ranks, cmd=cmd)
    try:
        rc = job.wait(timeout)
    except subprocess.TimeoutExpired:
        job.kill()
        raise
    done = subprocess.CompletedProcess(job.proc.args, rc, "".join(job.stdout), "".join(job.stderr))
    return done, job


# How much longer than its yardsticks a job may take to end after a failure or a stop (see
# ended_promptly). Measured (2 cores, 2026-12-03, the tests that call it under the three MPIs):
# the end took at most 0.72 of the launch-to-failure time; data_prep's early error under Open
# MPI 4.1 took up to 1.9 of the bare jobs' time (2.6 s against 1.35-2.9 s: that launcher's end of
# a job varies), hence the wider factor there. A slow end still fails: 15 s more did.
ENDING_FACTOR = 2.0
BARE_FACTOR = 4.0

# Bare jobs, in mpi4py alone (a slow end in distcgan must not slow its yardstick too), that end
# the two ways distcgan ends a job: the last rank calls MPI_Abort while the others wait in a
# barrier (an error that one rank has); every rank finalises MPI and rank 0 exits with code 2, the
# others with 0 (an error they agreed on, or a stop).
BARE_ENDS = {
    "abort": """
import pathlib, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
pathlib.Path(sys.argv[1], f"rank{comm.rank}").touch()
comm.Barrier()
if comm.rank == comm.size - 1:
    comm.Abort(1)
comm.Barrier()
""",
    "exit": """
import os, pathlib, sys
from mpi4py import MPI
rank = MPI.COMM_WORLD.rank
pathlib.Path(sys.argv[1], f"rank{rank}").touch()
MPI.COMM_WORLD.Barrier()
MPI.Finalize()
os._exit(2 if rank == 0 else 0)
""",
}


def bare_end_s(job: Background) -> float:
    """Seconds that the job's launcher takes for the slower of two bare jobs of the same size
    (BARE_ENDS): Python's and MPI's start, and the launcher's own end of a job (Open MPI 4.1
    took 2.9 s to end a bare job of 2 ranks whose rank 0 exits 2 after MPI_Finalize, against
    0.4 s for exit 0; 2026-12-03). Each rank leaves a file in an empty folder first, so that a
    launch that failed is told from a short one."""
    launcher, flag, ranks = job.proc.args[:3]
    assert flag == "-n", job.proc.args
    # os.environ, not the process's environment: a test module that imports mpi4py.MPI makes
    # this process an MPI singleton, whose Open MPI 4.1 exports variables (C setenv, which
    # os.environ does not see) that made a child mpiexec end at once with exit 1, silently.
    env = dict(os.environ)
    took = []
    for code in BARE_ENDS.values():
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [launcher, "-n", ranks, sys.executable, "-m", "mpi4py", "-c", code, tmp]
            t0 = time.time()
            subprocess.run(cmd, capture_output=True, timeout=120, cwd=REPO, env=env)
            took.append(time.time() - t0)
            ran = sorted(p.name for p in Path(tmp).iterdir())
        if ran != [f"rank{r}" for r in range(int(ranks))]:  # a launch that failed is no yardstick
            raise AssertionError(f"a bare job of {ranks} ranks did not run (it left {ran})")
    return max(took)


def ended_promptly(job: Background, failed_at: float) -> str | None:
    """Why the job did not end promptly after its failure (or stop) at `failed_at`, or None.
    "Promptly" is measured against yardsticks taken on the same machine at the same time, not in
    seconds, which depend on the machine and its load: the job must end within ENDING_FACTOR
    times what it took from its launch to the failure (start-up included: Python, torch, MPI),
    or, failing that, BARE_FACTOR times what bare jobs of its size that end as distcgan ends a
    job take under the same launcher (BARE_ENDS, run then, and only then: a failure soon after
    the launch leaves the first yardstick short of the launcher's own end of a job). A job
    that does not end at all is caught by the wait's timeout."""
    assert job.ended is not None
    reaching, ending = failed_at - job.launched, job.ended - failed_at
    if ending < ENDING_FACTOR * reaching:
        return None
    bare = bare_end_s(job)
    if ending < BARE_FACTOR * bare:
        return None
    return (
        f"ended {ending:.1f} s after the failure, which came {reaching:.1f} s after the launch; "
        f"a bare job of its size that ends as distcgan does took {bare:.1f} s"
    )


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# Lines an MPI launcher prints of its own beside ours: Open MPI frames its notices in lines of
# dashes, and its runtime (PRRTE, PMIx) tags its errors with "[host:pid] ".
LAUNCHER_TAG = re.compile(r"^\[[^\]\s]+:\d+\] ")


def own_lines(stderr: str) -> list[str]:
    """The non-empty stderr lines of our program, told from the launcher's by their form, not by
    counting: Open MPI's mpiexec adds a block framed by lines of dashes when a rank exits
    non-zero, and its runtime's errors start with "[host:pid] " (mpich adds neither)."""
    out, framed = [], False
    for line in stderr.splitlines():
        if line.startswith("-----") and set(line.strip()) == {"-"}:
            framed = not framed
        elif not framed and line.strip() and not LAUNCHER_TAG.match(line):
            out.append(line)
    return out


def member(pair, feed=None):
    """A step object's member (train/step.Member) for a test that steps it on its own batches
    (`update`): a pair, and no feed."""
    from types import SimpleNamespace

    return SimpleNamespace(pair=pair, feed=feed)


def events(stdout: str) -> list[dict]:
    import json

    return [json.loads(x) for x in stdout.splitlines() if x.startswith('{"rank"')]


# ---- evaluation: a tiny classifier, sample files, naive scores ----


KEYS = {
    "is_mean",
    "is_std",
    "fid",
    "per_class_fid",
    "class_accuracy",
    "network",
    "n",
    "splits",
    "precision",
    "recall",
    "per_class_precision",
    "per_class_recall",
}


class TinyClassifier(nn.Module):
    """A random 10-class scorer with 8 features: fast, and peaked enough for IS to mean much."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(256, 8)
        self.fc = nn.Linear(8, 10)
        with torch.no_grad():
            self.proj.weight.mul_(3.0)
            self.fc.weight.mul_(10.0)

    @torch.jit.export
    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x.flatten(1)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))


def save_tiny(path: Path, meta: dict | None = None, seed: int = 0) -> Path:
    torch.manual_seed(seed)
    extra = {METADATA: json.dumps(meta)} if meta else {}
    torch.jit.save(torch.jit.script(TinyClassifier().eval()), str(path), _extra_files=extra)
    return path


def make_samples(digits: Path, out: Path, per_class: int = 12, seed: int = 0) -> Path:
    """A stand-in sample file: real digits with noise added, `per_class` of each class."""
    rng = np.random.default_rng(seed)
    info = read_info(str(digits))
    images, labels = [], []
    for k in range(info.num_classes):
        x = load_class(str(digits), k)[:per_class].astype(np.int16)
        images.append(np.clip(x + rng.integers(-40, 40, size=x.shape), 0, 255).astype(np.uint8))
        labels.append(np.full(len(x), k))
    write_dataset(out, np.concatenate(images), np.concatenate(labels), info.class_names, "test")
    return out


def close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


def copy_data(digits_file: Path, folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    return Path(shutil.copy(digits_file, folder / "digits16.h5"))


def naive_is(probs: np.ndarray, splits: int, seed: int) -> tuple[float, float]:
    """The original IS code's loop, over splits cut from a seeded permutation of the samples."""
    perm = np.random.default_rng(seed).permutation(len(probs))
    scores = []
    for chunk in np.array_split(perm, splits):
        part = probs[chunk]
        kl = part * (np.log(part) - np.log(np.mean(part, 0, keepdims=True)))
        scores.append(np.exp(np.mean(np.sum(kl, 1))))
    return float(np.mean(scores)), float(np.std(scores))


def naive_fid(x1: np.ndarray, x2: np.ndarray) -> float:
    """pytorch-fid's formula: np.cov, then scipy's general matrix square root."""
    mu1, mu2 = x1.mean(0), x2.mean(0)
    c1, c2 = np.cov(x1, rowvar=False), np.cov(x2, rowvar=False)
    covmean = scipy.linalg.sqrtm(c1 @ c2).real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(c1 + c2 - 2 * covmean))


def exact_fid(x1: np.ndarray, x2: np.ndarray) -> float:
    """FID for few samples (n < d, singular covariances, where sqrtm is inaccurate): Tr (C1 C2)^1/2
    is the nuclear norm of X1c X2c^T / sqrt((n1 - 1)(n2 - 1)), X1c, X2c the centred features."""
    x1c, x2c = x1 - x1.mean(0), x2 - x2.mean(0)
    tr_sqrt = np.linalg.svd(x1c @ x2c.T, compute_uv=False).sum()
    tr_sqrt /= np.sqrt((len(x1) - 1) * (len(x2) - 1))
    c1, c2 = np.cov(x1, rowvar=False), np.cov(x2, rowvar=False)
    return float(((x1.mean(0) - x2.mean(0)) ** 2).sum() + np.trace(c1 + c2) - 2 * tr_sqrt)


def spy_kernels(monkeypatch) -> list[str]:
    """The names of the linear layers' kernels called from here on (torch.baddbmm, conv2d), in
    order; monkeypatch.undo() ends the spying."""
    calls: list[str] = []

    def spying(name, real):
        def spy(*a, **k):
            calls.append(name)
            return real(*a, **k)

        return spy

    for module, name in ((torch, "baddbmm"), (nn.functional, "conv2d")):
        monkeypatch.setattr(module, name, spying(name, getattr(module, name)))
    return calls


# ---- what a refusal says, and two checkpoints alike ----


def refusal(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What `distcgan ARGS`, run in this process, says on stderr when it refuses them: exit 2
    and one line (asserted), returned."""
    from distcgan.cli import main  # the package under test, loaded where a test asks for it

    capsys.readouterr()
    assert main(list(args)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def assert_same_states(a: dict, b: dict, label: object) -> None:
    """Two checkpoints' states (run.checkpoint.read) hold the same step, the same G, D and G's
    moving average, Adam states and noise stream, bit for bit; `label` names them on failure."""

    def same(x: dict, y: dict) -> bool:
        return x.keys() == y.keys() and all(torch.equal(x[n], y[n]) for n in x)

    assert a["step"] == b["step"], label
    for role in ("G", "D", "G_ema"):
        assert same(a[role], b[role]), (label, role)
    for opt in ("opt_g", "opt_d"):
        sa, sb = a[opt]["state"], b[opt]["state"]
        assert sa.keys() == sb.keys(), (label, opt)
        assert all(same(sa[i], sb[i]) for i in sa), (label, opt)
    assert torch.equal(a["rng"]["noise"], b["rng"]["noise"]), label
