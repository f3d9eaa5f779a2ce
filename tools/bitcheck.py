"""What a user sees, digested bit for bit from one checkout, so that two checkouts can be compared;
and the training step's speed of two checkouts in alternating windows.

    .venv/bin/python tools/bitcheck.py CHECKOUT OUT.json        # run the list below, write digests
    .venv/bin/python tools/bitcheck.py --compare A.json B.json  # every difference; exit 1 if any
    .venv/bin/python tools/bitcheck.py --bench OLD NEW          # bench, bench --fuse 10: ABAB...

CHECKOUT is a git worktree (`git worktree add --detach /tmp/bitcheck-base COMMIT`). Every command
runs from it (cwd and PYTHONPATH the checkout, so its own distcgan and data_prep are imported),
with the Python and mpiexec of the venv that runs this script, OMP_NUM_THREADS=1 and
`--threads 1`, so that nothing depends on the machine's cores. The list (issue 79, "Nothing a
user sees changes"), all on the embedded digits that the checkout's data_prep writes:

- the demo's configuration (Makefile `demo`: digits preset, 10 classes on 2 ranks) at 30 steps a
  class, then its sample, evaluate (2 ranks, with a digits classifier trained first), export and
  generate (a PNG grid and a sample file);
- `--fuse 3` on 5 classes; a NaN rollback (`nan:1:4`) fused and alone; a data-parallel cgan on 2
  ranks (exported, and generated from); `--schedule async`; `--augment` (every policy, ADA's p,
  fused and alone): the tiny preset, one process unless said;
- `evaluate` of a tiny run and of a sample file, and `compare --seeds 2` on the tiny preset (2
  ranks).

The digest of a run folder holds every file in it: each tensor of every checkpoint, TorchScript,
torch.export and safetensors file by name (dtype, shape, SHA-256 of its bytes, so file timestamps
and zip layout do not matter); JSON and JSON-lines files with the fields that hold a time, a
speed, a host, a process id or a commit left out; PNG pixels; HDF5 datasets and attributes;
Markdown text with durations and speeds masked. Of each command: its exit code, its JSON event
lines (per rank, in order, filtered as the files are) and its other stdout lines with the numbers
masked. The work folder and checkout paths are written as <work> and <checkout>. Left out:
TensorBoard event files (only that they exist: they hold wall times; metrics.jsonl holds the same
values), the run lock, stderr (warnings; its tail is kept in "meta", which --compare skips).

Every command gets PYTHONHASHSEED=0: compare's label TV sums over a set of class names, and its
last bit otherwise changes from process to process. The same checkout digested twice then gives
the same digests (benchmarks/results/2026-12-07-bitcheck/README.md, where the baseline is). It
took 6.6 minutes alone on a 2-core AMD EPYC that other jobs kept busy (load 10), 15 with three
checks at once.

--bench runs `distcgan bench` (32 px, batch 64: the default step) and `bench --fuse 10` (16 px,
batch 32, 10 classes) from each checkout in turn, OLD NEW OLD NEW... (--rounds, default 3, of
each), one process per window (SHORT: one timed window of 6 steps in it, one thread), and prints
each window's images/s, each median and NEW's median over OLD's, then one JSON line of them all.
No benchmarks/ script does this: fused_alternatives.py alternates windows inside one process,
between variants of one checkout's code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BIN = Path(sys.prefix) / "bin"  # the venv running this script: its python and mpiexec
STEP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Step:
    """One command: `python -m MODULE ARGS` (under `mpiexec -n RANKS` when RANKS is given).
    In ARGS, {w} is the work folder, {d} the data file, {c} the classifier."""

    name: str
    args: tuple[str, ...]
    ranks: int | None = None
    module: str = "distcgan"
    fault: str | None = None  # injected into a train command (see fault_injection)


TINY = ("train", "--preset", "tiny", "--data", "{d}", "--threads", "1", "--no-progress")
COMMON = ("--no-progress",)
NET = ("--network", "{c}")
ALL = tuple(str(k) for k in range(10))

STEPS = (
    Step("data", ("digits", "--out", "{d}", "--resolution", "16"), module="data_prep"),
    Step("classifier", ("classifier", "train", "{d}", "--out", "{c}", "--epochs", "2", *COMMON)),
    # Makefile demo: `mpiexec -n 2 ... train --preset digits --data DATA --run RUN`, 30 steps
    Step(
        "demo",
        ("train", "--preset", "digits", "--data", "{d}", "--run", "{w}/demo", "--steps", "30")
        + ("--threads", "1", *COMMON),
        ranks=2,
    ),
    Step(
        "demo-sample",
        ("sample", "--run", "{w}/demo", "--per-class", "10", "--out", "{w}/demo/samples.h5")
        + ("--grid", "{w}/demo/samples.png", *COMMON),
    ),
    Step("demo-evaluate", ("evaluate", "--run", "{w}/demo", *NET, "--n", "1000", *COMMON), 2),
    Step("demo-export", ("export", "--run", "{w}/demo", "--out", "{w}/demo-export")),
    Step(
        "demo-generate-png",
        ("generate", "--model", "{w}/demo-export", "--class", *ALL, "--n", "4")
        + ("--out", "{w}/generated.png"),
    ),
    Step(
        "demo-generate-h5",
        ("generate", "--model", "{w}/demo-export", "--class", "3", "8", "--n", "5")
        + ("--seed", "1", "--out", "{w}/generated.h5"),
    ),
    Step("fuse3", (*TINY, "--run", "{w}/fuse3", "--classes", *ALL[:5], "--fuse", "3")),
    Step(
        "nan-fused",
        (*TINY, "--run", "{w}/nan-fused", "--classes", "0", "1", "2", "--fuse", "3"),
        fault="nan:1:4",
    ),
    Step(
        "nan-alone",
        (*TINY, "--run", "{w}/nan-alone", "--classes", "0", "1", "2", "--fuse", "1"),
        fault="nan:1:4",
    ),
    Step(
        "cgan",
        (*TINY, "--run", "{w}/cgan", "--mode", "cgan", "--classes", "0", "1", "2", "--steps", "8"),
        ranks=2,
    ),
    Step("cgan-export", ("export", "--run", "{w}/cgan", "--out", "{w}/cgan-export")),
    Step(
        "cgan-generate",
        ("generate", "--model", "{w}/cgan-export", "--class", "0", "1", "2", "--n", "4")
        + ("--out", "{w}/cgan-generated.png"),
    ),
    Step("async", (*TINY, "--run", "{w}/async", "--classes", "0", "1", "--schedule", "async")),
    Step(
        "augment",
        (*TINY, "--run", "{w}/augment", "--classes", "0", "1", "2", "--fuse", "2")
        + ("--augment", "color,translation,cutout", "--augment-p", "auto"),
    ),
    Step(
        "evaluate-tiny",
        ("evaluate", "--run", "{w}/fuse3", *NET, "--n", "200", "--splits", "2", "--seed", "0")
        + COMMON,
    ),
    Step(
        "evaluate-samples",
        ("evaluate", "--samples", "{w}/demo/samples.h5", "--data", "{d}", *NET, "--splits", "2")
        + ("--json", "{w}/samples-evaluate.json", *COMMON),
    ),
    Step(
        "compare",
        ("compare", "--preset", "tiny", "--data", "{d}", "--out", "{w}/compare", "--seeds", "2")
        + ("--classes", "0", "1", "2", "--n", "200", "--splits", "2", "--classifier-epochs", "2")
        + ("--threads", "1", *COMMON),
        ranks=2,
    ),
)


# ---- what is left out or masked -----------------------------------------------------------------

# Keys whose values are times, speeds, places or versions of the code, not results.
VOLATILE_KEYS = frozenset(
    {"time", "time_unix", "time_utc", "timestamp", "date", "started", "ended", "host", "hosts"}
    | {"hostname", "pid", "pids", "git_commit", "commit", "elapsed", "wall", "peak_rss_mb"}
)
KEPT_S = frozenset({"time_limit_s", "budget_s"})  # config fields that end in _s: settings, kept


def volatile(key: str) -> bool:
    """Whether a field holds a time or speed (…_s, …_per_s, s_per_…) or a place (host, pid)."""
    if key in KEPT_S:
        return False
    return key in VOLATILE_KEYS or key.endswith(("_s", "_mb", "_utc")) or key.startswith("s_per_")


class Normal:
    """Writes the work folder and the checkout as <work> and <checkout> in every string."""

    def __init__(self, work: Path, checkout: Path) -> None:
        self.pairs = [(str(work), "<work>"), (str(checkout), "<checkout>")]

    def text(self, s: str) -> str:
        for old, new in self.pairs:
            s = s.replace(old, new)
        s = FID_CACHE.sub(r"\1-<sha>-<sha>.h5", s)
        return re.sub(r"\b[0-9a-f]{40}\b", "<commit>", s)

    def value(self, obj: Any) -> Any:
        """A JSON value with the volatile keys left out, the paths written as names, the
        SHA-256 of a file written as <sha256>, and a string that holds a JSON object (an HDF5
        attribute's provenance) read as one."""
        if isinstance(obj, dict):
            return {str(k): self.field(str(k), v) for k, v in obj.items() if not volatile(str(k))}
        if isinstance(obj, (list, tuple)):
            return [self.value(v) for v in obj]
        if isinstance(obj, str) and obj.startswith("{"):
            try:
                return self.value(json.loads(obj))
            except json.JSONDecodeError:
                return self.text(obj)
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, bytes):
            return self.text(obj.decode(errors="replace"))
        if hasattr(obj, "tolist"):  # numpy scalars and arrays (HDF5 attributes)
            return self.value(obj.tolist())
        if obj is None or isinstance(obj, (bool, int, float)):
            return obj
        return repr(obj)

    def field(self, key: str, value: Any) -> Any:
        # A file's SHA-256 changes with what the file records besides its content (the commit
        # and paths in a data file's provenance): its content is digested on its own.
        if key.endswith("sha256") and isinstance(value, str) and SHA256.fullmatch(value):
            return "<sha256>"
        return self.value(value)


SHA256 = re.compile(r"[0-9a-f]{64}")
# Cached real statistics: DATA.fid-NETWORK-NETSHA-DATASHA.h5, named by two files' SHA-256
FID_CACHE = re.compile(r"(\.fid-[\w.-]+?)-[0-9a-f]{16}-[0-9a-f]{16}\.h5")

DURATION = re.compile(
    r"\d[\d,]*(\.\d+)?\s?(ms|s|min|h|seconds?|minutes?|images/s|img/s|MB|GB|GiB|MiB)\b"
)


def masked_line(line: str, normal: Normal) -> str:
    """A text line with its numbers masked and its spaces collapsed (a table's widths vary)."""
    return " ".join(re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", normal.text(line)).split())


# ---- digests of files ---------------------------------------------------------------------------


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]


def tensor_digest(t: Any) -> str:
    """dtype, shape and the SHA-256 of the values in row-major order (not of their layout)."""
    import torch

    flat = t.detach().cpu().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return f"{str(t.dtype).removeprefix('torch.')} {list(t.shape)} {sha(raw)}"


def tree(obj: Any, normal: Normal, prefix: str = "") -> dict[str, Any]:
    """A nested state (dicts, lists, tensors, numbers, strings) flattened to name -> digest."""
    import torch

    if isinstance(obj, torch.Tensor):
        return {prefix or ".": tensor_digest(obj)}
    if isinstance(obj, dict):
        items: Iterator[tuple[Any, Any]] = iter(obj.items())
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return {prefix or ".": normal.value(obj)}
    out: dict[str, Any] = {}
    for key, value in items:
        if not volatile(str(key)):
            out.update(tree(value, normal, f"{prefix}/{key}" if prefix else str(key)))
    return out


CHECKPOINT_MAGIC = b"distcgan-checkpoint-v"


def pt_digest(path: Path, normal: Normal) -> dict[str, Any]:
    """A distcgan checkpoint (magic line, checksum line, torch.save payload), a TorchScript file
    (its tensors and code) or a torch.save file."""
    import io

    import torch

    data = path.read_bytes()
    if data.startswith(CHECKPOINT_MAGIC):
        magic, _checksum, payload = data.split(b"\n", 2)
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        return {"format": magic.decode(), **tree(state, normal)}
    archive = zipfile.ZipFile(io.BytesIO(data)) if zipfile.is_zipfile(path) else None
    if archive and any(n.endswith("/constants.pkl") for n in archive.namelist()):
        return torchscript_digest(archive, data, normal)
    return {"format": "torch.save", **tree(torch.load(path, weights_only=True), normal)}


def torchscript_digest(archive: zipfile.ZipFile, data: bytes, normal: Normal) -> dict[str, Any]:
    """A TorchScript file: its module's class and code, its tensors, and its extra files (the
    classifier's metadata JSON)."""
    import io

    import torch

    module = torch.jit.load(io.BytesIO(data), map_location="cpu")
    out: dict[str, Any] = {"format": "torchscript", "code": sha(module.code.encode())}
    out["class"] = module._c._type().qualified_name()
    for name in archive.namelist():
        if "/extra/" in name:
            text = archive.read(name).decode(errors="replace")
            out[f"extra/{name.split('/extra/')[1]}"] = normal.value(text)
    return {**out, **tree(dict(module.state_dict()), normal)}


def pt2_digest(path: Path, normal: Normal) -> dict[str, Any]:
    """A torch.export archive: its graph's code, its state and constants."""
    import torch

    program = torch.export.load(str(path))
    out = {"code": sha(program.graph_module.code.encode())}
    out.update(tree(dict(program.state_dict), normal, "state"))
    out.update(tree(dict(program.constants), normal, "constants"))
    return out


def safetensors_digest(path: Path, normal: Normal) -> dict[str, Any]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        out: dict[str, Any] = {"metadata": normal.value(f.metadata() or {})}
        for name in f.keys():
            out[name] = tensor_digest(f.get_tensor(name))
    return out


def h5_digest(path: Path, normal: Normal) -> dict[str, Any]:
    """Every dataset's dtype, shape and bytes, and every attribute (volatile ones left out)."""
    import h5py
    import numpy as np

    out: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        if isinstance(obj, h5py.Dataset):
            values = np.ascontiguousarray(obj[()])
            out[name] = f"{values.dtype} {list(values.shape)} {sha(values.tobytes())}"
        out[f"{name}@"] = normal.value(dict(obj.attrs))

    with h5py.File(path, "r") as f:
        out["/@"] = normal.value(dict(f.attrs))
        f.visititems(visit)
    return out


def png_digest(path: Path, normal: Normal) -> dict[str, Any]:
    from PIL import Image

    with Image.open(path) as im:
        info = {k: v for k, v in im.info.items() if isinstance(v, (str, int, float))}
        return {"image": f"{im.mode} {list(im.size)} {sha(im.tobytes())}", **normal.value(info)}


def json_digest(path: Path, normal: Normal) -> Any:
    return normal.value(json.loads(path.read_text()))


def jsonl_digest(path: Path, normal: Normal) -> Any:
    return [normal.value(json.loads(x)) for x in path.read_text().splitlines() if x.strip()]


TIME_COLUMN = re.compile(r"(\bs|seconds|/s)$")  # a table column of seconds or of a speed


def text_digest(path: Path, normal: Normal) -> Any:
    """Markdown lines with durations and speeds masked, and in a table, the cells of a column
    whose header says seconds or a speed ("train s", "core s", "images/s")."""
    out: list[str] = []
    header: list[str] = []
    for line in path.read_text().splitlines():
        line = DURATION.sub("<t>", normal.text(line))
        if not line.startswith("|"):
            header = []
        elif not header:
            header = [c.strip() for c in line.split("|")]
        else:
            cells = line.split("|")
            timed = [i for i, h in enumerate(header) if i < len(cells) and TIME_COLUMN.search(h)]
            for i in timed:
                cells[i] = " <t> "
            line = "|".join(cells)
        out.append(line)
    return out


DIGESTS: dict[str, Callable[[Path, Normal], Any]] = {
    ".pt": pt_digest,
    ".pt2": pt2_digest,
    ".safetensors": safetensors_digest,
    ".h5": h5_digest,
    ".png": png_digest,
    ".json": json_digest,
    ".jsonl": jsonl_digest,
    ".md": text_digest,
    ".txt": text_digest,
}


def file_key(rel: str) -> str:
    """A file's name in the digest: TensorBoard's (time, host, pid in it) as its folder's."""
    if ".tfevents." in rel:
        return rel.split("events.out.tfevents.")[0] + "events.out.tfevents.*"
    return rel


def digest_files(work: Path, normal: Normal) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in sorted(p for p in work.rglob("*") if p.is_file()):
        rel = file_key(normal.text(str(path.relative_to(work))))
        if path.name == ".lock":
            continue
        if rel.endswith(".tfevents.*"):
            out[rel] = out.get(rel, 0) + 1  # how many; their content holds wall times
            continue
        how = DIGESTS.get(path.suffix)
        try:
            out[rel] = how(path, normal) if how else {"bytes": sha(path.read_bytes())}
        except Exception as exc:  # a file that does not load is a result too
            out[rel] = {"unreadable": f"{type(exc).__name__}: {normal.text(str(exc))[:300]}"}
    return out


# ---- running the list ---------------------------------------------------------------------------


FAULT_ENV = re.compile(r"environ(?:\.get\(|\[)\s*[\"'](\w*FAULT\w*)[\"']")


def fault_injection(checkout: Path, fault: str) -> tuple[list[str], dict[str, str]]:
    """How this checkout injects `fault` into train: the environment variable its faults.py
    reads, if it reads one, else `--inject-fault` (1b71c15)."""
    faults = checkout / "distcgan" / "faults.py"
    found = FAULT_ENV.search(faults.read_text()) if faults.is_file() else None
    if found:
        return [], {found.group(1): fault}
    return ["--inject-fault", fault], {}


def command(step: Step, paths: dict[str, str]) -> list[str]:
    args = [a.format(**paths) for a in step.args]
    py = [str(BIN / "python"), "-m"]
    if step.ranks is None:
        return [*py, step.module, *args]
    return [str(BIN / "mpiexec"), "-n", str(step.ranks), *py, "mpi4py", "-m", step.module, *args]


def events(stdout: str, normal: Normal) -> dict[str, Any]:
    """The JSON event lines per rank (ranks' lines interleave at random), and the other lines
    with their numbers masked."""
    by_rank: dict[str, list[Any]] = {}
    text = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                text.append(masked_line(line, normal))
                continue
            rank = str(obj.get("rank", "-")) if isinstance(obj, dict) else "-"
            by_rank.setdefault(rank, []).append(normal.value(obj))
        elif line.strip():
            text.append(masked_line(line, normal))
    return {"events": dict(sorted(by_rank.items())), "stdout": text}


def run_step(step: Step, checkout: Path, paths: dict[str, str], normal: Normal) -> dict[str, Any]:
    cmd = command(step, paths)
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
    # PYTHONHASHSEED: compare's label TV sums over a set of class names, whose order (and so
    # the sum's last bit) otherwise changes from process to process.
    env.update({"MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"})
    if step.fault:
        extra, fault_env = fault_injection(checkout, step.fault)
        cmd += extra
        env.update(fault_env)
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S
    )
    took = time.monotonic() - t0
    print(f"  {step.name}: exit {proc.returncode}, {took:.1f} s", flush=True)
    result: dict[str, Any] = {"argv": [normal.text(a) for a in cmd[cmd.index(step.module) :]]}
    result |= {"rc": proc.returncode, **events(proc.stdout, normal)}
    meta = {"seconds": round(took, 1), "stderr_tail": normal.text(proc.stderr[-1500:])}
    return {"result": result, "meta": meta}


def refuse(message: str) -> int:
    """Bad input: one line on stderr, exit code 2."""
    print(f"bitcheck: {message}", file=sys.stderr)
    return 2


def git(checkout: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True)
    return out.stdout.strip()


def machine() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = re.search(r"Model name:\s*(.+)", out)
    return f"{model.group(1) if model else platform.processor()}, {os.cpu_count()} CPUs"


def check(checkout: Path, out_json: Path, keep: bool) -> int:
    """Run STEPS from `checkout` in a fresh work folder and write their digests to `out_json`."""
    checkout = checkout.resolve()
    if not (checkout / "distcgan" / "__main__.py").is_file():
        return refuse(f"{checkout} is not a distcgan checkout (no distcgan/__main__.py)")
    work = Path(tempfile.mkdtemp(prefix="bitcheck-work-", dir="/tmp"))
    paths = {"w": str(work), "d": str(work / "data" / "digits16.h5"), "c": str(work / "cls.pt")}
    (work / "data").mkdir()
    normal = Normal(work, checkout)
    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), time.monotonic()
    print(f"bitcheck: {checkout} at {git(checkout, 'rev-parse', 'HEAD')[:12]} in {work}")
    runs, metas = {}, {}
    for step in STEPS:
        done = run_step(step, checkout, paths, normal)
        runs[step.name], metas[step.name] = done["result"], done["meta"]
    files = digest_files(work, normal)
    meta = {
        "checkout": str(checkout),
        "commit": git(checkout, "rev-parse", "HEAD"),
        "uncommitted": git(checkout, "status", "--porcelain", "--untracked-files=no") != "",
        "machine": machine(),
        "python": str(BIN / "python"),
        "started_utc": started,
        "seconds": round(time.monotonic() - t0, 1),
        "steps": metas,
    }
    doc = {"format": "distcgan-bitcheck-1", "meta": meta, "runs": runs, "files": files}
    out_json.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_json.with_name(out_json.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, out_json)
    if not keep:
        shutil.rmtree(work)
    failed = [name for name, r in runs.items() if r["rc"] != 0]
    print(f"wrote {out_json} ({meta['seconds']} s); exit codes not 0: {failed or 'none'}")
    return 0


# ---- comparing two digests ----------------------------------------------------------------------


def flatten(obj: Any, prefix: str, out: dict[str, str]) -> dict[str, str]:
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            flatten(value, f"{prefix}/{key}", out)
    elif isinstance(obj, list) and obj:
        for i, value in enumerate(obj):
            flatten(value, f"{prefix}[{i}]", out)
    else:
        out[prefix] = json.dumps(obj, sort_keys=True)
    return out


def compare(a_path: Path, b_path: Path) -> int:
    """Print every difference between two digests (their "meta" aside); 1 if any, else 0."""
    for path in (a_path, b_path):
        if not path.is_file():
            return refuse(
                f"{path}: no such digest (write one: python tools/bitcheck.py CHECKOUT OUT.json)"
            )
    a, b = (json.loads(p.read_text()) for p in (a_path, b_path))
    for name, doc in (("A", a), ("B", b)):
        m = doc["meta"]
        dirty = " with uncommitted changes" if m["uncommitted"] else ""
        print(f"{name}: {m['commit'][:12]}{dirty} ({m['checkout']}, {m['started_utc']})")
    fa, fb = (flatten({k: d[k] for k in ("runs", "files")}, "", {}) for d in (a, b))
    diffs = 0
    for key in sorted(fa.keys() | fb.keys()):
        va, vb = fa.get(key), fb.get(key)
        if va != vb:
            diffs += 1
            print(f"{key}\n  A: {_short(va)}\n  B: {_short(vb)}")
    print(f"{diffs} difference(s) in {len(fa.keys() | fb.keys())} digested values")
    return 1 if diffs else 0


def _short(value: str | None) -> str:
    if value is None:
        return "(absent)"
    return value if len(value) <= 300 else value[:300] + "..."


# ---- speed, alternating windows -----------------------------------------------------------------


SHORT = ("--windows", "1", "--steps", "6", "--warmup", "2", "--threads", "1")
BENCHES = {
    "bench": (("bench", *SHORT), ("ours_img_s",)),
    "bench --fuse 10": (
        ("bench", "--fuse", "10", "--resolution", "16", "--batch-size", "32", *SHORT),
        ("fused_img_s", "one_at_a_time_img_s"),
    ),
}


@dataclass
class Arm:
    name: str
    checkout: Path
    windows: dict[str, list[float]] = field(default_factory=dict)


def bench_window(arm: Arm, args: tuple[str, ...]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(arm.checkout), "OMP_NUM_THREADS": "1"}
    cmd = [str(BIN / "python"), "-m", "distcgan", *args]
    proc = subprocess.run(cmd, cwd=arm.checkout, env=env, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"bitcheck: {' '.join(args)} in {arm.checkout} failed: {proc.stderr[-1000:]}")
    return json.loads(lines[-1])


def bench(old: Path, new: Path, rounds: int) -> int:
    """Each bench of BENCHES `rounds` times from each checkout, OLD NEW OLD NEW..."""
    arms = [Arm("old", old.resolve()), Arm("new", new.resolve())]
    for arm in arms:
        if not (arm.checkout / "distcgan" / "__main__.py").is_file():
            return refuse(f"{arm.checkout} is not a distcgan checkout (no distcgan/__main__.py)")
    for arm in arms:
        print(f"{arm.name}: {arm.checkout} at {git(arm.checkout, 'rev-parse', 'HEAD')[:12]}")
    print(
        f"machine: {machine()}; each window one process: python -m distcgan ARGS {' '.join(SHORT)}"
    )
    summary: dict[str, Any] = {}
    for name, (args, keys) in BENCHES.items():
        for r in range(rounds):
            for arm in arms:
                got = bench_window(arm, args)
                for key in keys:
                    arm.windows.setdefault(f"{name}: {key}", []).append(got[key])
                shown = ", ".join(f"{k} {got[k]}" for k in keys)
                print(f"{name:16} window {r + 1} {arm.name}: {shown} img/s", flush=True)
        for key in keys:
            label = f"{name}: {key}"
            med = [statistics.median(arm.windows[label]) for arm in arms]
            summary[label] = {"old": arms[0].windows[label], "new": arms[1].windows[label]}
            summary[label]["new_over_old"] = round(med[1] / med[0], 4)
            print(f"{label}: median old {med[0]}, new {med[1]}: new/old {med[1] / med[0]:.3f}")
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="bitcheck.py", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("paths", nargs=2, metavar="PATH", help="CHECKOUT OUT.json, or two with a mode")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--compare", action="store_true", help="PATHS are two digests A B")
    mode.add_argument("--bench", action="store_true", help="PATHS are two checkouts OLD NEW")
    p.add_argument("--rounds", type=int, default=3, help="--bench: windows of each (default 3)")
    p.add_argument(
        "--keep", action="store_true", help="keep the work folder (/tmp/bitcheck-work-*)"
    )
    args = p.parse_args(argv)
    first, second = (Path(x) for x in args.paths)
    if args.compare:
        return compare(first, second)
    if args.bench:
        if args.rounds < 1:
            return refuse(f"--rounds {args.rounds}: give 1 or more windows of each checkout")
        return bench(first, second, args.rounds)
    return check(first, second, args.keep)


if __name__ == "__main__":
    sys.exit(main())
