"""Damaged inputs of every kind: a byte flipped anywhere inside a file a command reads (a data
file, a checkpoint, an export's weights and config, a TorchScript network, a sample file), not
only at its header or end. Each case either stops with exit 2 and one line on stderr that names
the damaged file (no traceback), or exits 0 with exactly the undamaged file's result, where the
byte cannot matter to that command (the unused tail of the last label chunk, a zip field torch
does not read); a damaged checkpoint is skipped for the previous one, and `train --resume` still
ends with the uninterrupted run's weights.

Positions are taken from each file's own layout, seeded: its first byte, its metadata (HDF5
object headers and B-trees, the safetensors header, the zip index, the checkpoint's first
line and checksum), the middle of its data and its last byte.

A flipped pixel is found by the class's digest, which the file keeps (format 2): `info` reads no
pixels (its output is checked to be unchanged), the commands that read a whole class (`anova`,
`evaluate`, `train` at its start) refuse it in one line naming the file and the class, `train`
before a run directory is made or replaced. The class names and digests carry HDF5's fletcher32
checksum. Not detected (and so not tried as a failure here): a flipped byte in the source
attribute, which only `info` shows. Format 1 files' string heap: tests/faults/
test_damaged_strings.py.

Each kind's cases run in one process, one after another, through distcgan.cli.main (the code of
`python -m distcgan`; stderr captured at the file descriptor), so that the start-up of torch is
paid once per kind, not once per case.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import REPO, make_samples, own_lines, run_cli, save_tiny, tiny_args

from distcgan.run.checkpoint import read

pytestmark = pytest.mark.slow

SEED = 78
PER_KIND = 8

# Runs each case of argv lists through distcgan.cli.main, stdout and stderr captured at the file
# descriptor (C libraries' own lines included); writes [{rc, stdout, stderr}] to argv[2].
DRIVER = r"""
import json, os, sys, tempfile
from distcgan.cli import main

def run(argv):
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os.dup2(saved[0], 1); os.dup2(saved[1], 2)
            os.close(saved[0]); os.close(saved[1])
        out.seek(0); err.seek(0)
        return {"rc": rc, "stdout": out.read().decode(errors="replace"),
                "stderr": err.read().decode(errors="replace")}

cases = json.loads(open(sys.argv[1]).read())
json.dump([run(argv) for argv in cases], open(sys.argv[2], "w"))
"""


def run_cases(tmp: Path, cases: list[list[str]]) -> list[dict]:
    todo, done = tmp / "cases.json", tmp / "results.json"
    todo.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-c", DRIVER, str(todo), str(done)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(done.read_text())


def flipped(src: Path, dst: Path, pos: int) -> Path:
    """A copy of `src` at `dst` with every bit of byte `pos` flipped (a new file: never written
    through a hard link into the original)."""
    data = bytearray(src.read_bytes())
    data[pos] ^= 0xFF
    dst.unlink(missing_ok=True)
    dst.write_bytes(bytes(data))
    return dst


def spread(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
    """n seeded positions in [lo, hi), one in each of n equal slices."""
    edges = np.linspace(lo, hi, n + 1).astype(int)
    return [int(rng.integers(a, max(a + 1, b))) for a, b in zip(edges[:-1], edges[1:])]


def said_in_one_line(result: dict, damaged: Path, why: str) -> None:
    """Exit 2, one line on stderr naming the damaged file, no traceback."""
    lines = own_lines(result["stderr"])
    assert "Traceback" not in result["stderr"], (why, result["stderr"][-2000:])
    assert result["rc"] == 2, (why, result["rc"], result["stderr"][-2000:])
    assert len(lines) == 1 and str(damaged) in lines[0], (why, lines)


def refused_or_unchanged(result: dict, base: dict, damaged: Path, original: Path, why: str):
    """Refused in one line naming the file, or exit 0 with the undamaged file's output."""
    if result["rc"] != 0:
        said_in_one_line(result, damaged, why)
        return
    assert own_lines(result["stderr"]) == [], (why, result["stderr"][-2000:])
    assert result["stdout"].replace(str(damaged), str(original)) == base["stdout"], why


# ---- the files: a data file, a finished run, its export, a network, a sample file ----------


@pytest.fixture(scope="module")
def files(tmp_path_factory, digits_file) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("damaged")
    run, export = root / "run", root / "export"
    flags = ("--classes", "0", "1", "--steps", "4", "--checkpoint-every", "2")
    done = run_cli(*tiny_args(digits_file, run, *flags, "--devices", "cpu", "--threads", "1"))
    assert done.returncode == 0, done.stderr
    done = run_cli("export", "--run", str(run), "--out", str(export))
    assert done.returncode == 0, done.stderr
    net = save_tiny(root / "net.pt")
    samples = make_samples(digits_file, root / "samples.h5", per_class=12)
    return {"data": digits_file, "run": run, "export": export, "net": net, "samples": samples}


def string_heap(data: bytes) -> range:
    """The bytes of an HDF5 file's global heap, which holds variable-length strings: a data or
    sample file (format 2) and the statistics cache (version 2) have none, because a flipped
    object length there makes HDF5 loop without end reading the string (tests/faults/
    test_damaged_strings.py: format 1 data files, read in a child process with a time limit)."""
    at = data.find(b"GCOL")
    return range(at, at + int.from_bytes(data[at + 8 : at + 16], "little")) if at >= 0 else range(0)


def hdf5_positions(path: Path, rng: np.random.Generator) -> tuple[list[int], set[int], set[int]]:
    """Positions in a data or sample file, those of them in pixels and those that must be
    refused (all but the two seeded bytes and the last byte): the first byte (the
    superblock); the metadata by its parts (the signature of each B-tree, of the chunk indexes
    too, and of the root group's heap; the version byte of the images' and the labels' object
    headers) and two seeded bytes of it; a class offset, the middle of the pixels, a real
    row's label, a byte of the class names and of the digests, and the last byte (in the last
    label chunk's unused tail)."""
    import h5py

    data = path.read_bytes()
    with h5py.File(path, "r") as f:
        images, labels, offsets = f["images"], f["labels"], f["class_offsets"]
        shape = images.shape
        chunks = [images.id.get_chunk_info(i) for i in range(images.id.get_num_chunks())]
        label0 = labels.id.get_chunk_info(0).byte_offset
        offsets_at, k = offsets.id.get_offset(), offsets.shape[0] - 1
        headers = [h5py.h5o.get_info(d.id).addr for d in (images, labels)]
        names, digests = (f[n].id.get_chunk_info(0) for n in ("class_names", "class_digests"))
    trees = [i for i in range(chunks[0].byte_offset) if data.startswith(b"TREE", i)]
    heap = data.find(b"HEAP")
    skip = {*string_heap(data), *range(offsets_at, offsets_at + 8 * (k + 1))}
    meta = [p for p in range(1, chunks[0].byte_offset) if p not in skip]
    middle, row_bytes = chunks[len(chunks) // 2], int(np.prod(shape[1:]))
    used = min(middle.size, (shape[0] - middle.chunk_offset[0]) * row_bytes)
    pixel = middle.byte_offset + used // 2  # in a real row (a sample file has one chunk)
    positions = [0, *(t + int(rng.integers(0, 4)) for t in trees), heap + int(rng.integers(0, 4))]
    positions += [*headers, *(meta[i] for i in spread(rng, 0, len(meta), 2))]
    positions += [offsets_at + 8 * int(rng.integers(1, k + 1)), pixel]
    positions += [label0 + 8 * int(rng.integers(0, 100))]
    positions += [c.byte_offset + int(rng.integers(0, c.size)) for c in (names, digests)]
    positions += [len(data) - 1]
    seeded = {positions[-8], positions[-7]}
    return positions, {pixel}, set(positions) - seeded - {len(data) - 1}


def test_a_damaged_data_file_is_said_in_one_line(files, tmp_path):
    rng = np.random.default_rng(SEED)
    src = files["data"]
    positions, pixels, refused = hdf5_positions(src, rng)
    copies = [flipped(src, tmp_path / f"data{i}.h5", p) for i, p in enumerate(positions)]
    # info reads the layout, labels and attributes; anova every class's pixels as well
    cases = [[cmd, str(f)] for f in (src, *copies) for cmd in ("info", "anova")]
    results = run_cases(tmp_path, cases)
    base = results[:2]
    assert [r["rc"] for r in base] == [0, 0], base
    for i, (pos, copy) in enumerate(zip(positions, copies)):
        info, anova = results[2 + 2 * i : 4 + 2 * i]
        if pos in pixels:  # info reads no pixels; anova's line names the class
            assert info["rc"] == 0 and info["stdout"] == base[0]["stdout"].replace(
                str(src), str(copy)
            ), (pos, info["stderr"][-2000:])
            said_in_one_line(anova, copy, f"byte {pos}")
            assert "'s images differ from the digest stored" in anova["stderr"], pos
            continue
        for result, ref in ((info, base[0]), (anova, base[1])):
            refused_or_unchanged(result, ref, copy, src, f"byte {pos}")
    said = {p for i, p in enumerate(positions) if results[3 + 2 * i]["rc"]}  # by anova
    assert said >= refused, f"bytes {sorted(refused - said)} were not noticed"


def test_damaged_pixels_stop_train_before_a_run_is_touched(files, tmp_path):
    """A flipped pixel of a trained class: `train --overwrite` over a finished run, and a new
    run, each stop in one line naming the file and the class, exit 2, before the old run is
    removed or a new one made (the digests are checked where the data's fingerprint is made,
    at every launch). A class whose pixels are intact trains."""
    import h5py

    src = files["data"]
    with h5py.File(src) as f:
        first = f["images"].id.get_chunk_info(0).byte_offset
    damaged = flipped(src, tmp_path / "data.h5", first + 10)  # row 0: class 0
    old = shutil.copytree(files["run"], tmp_path / "old")
    before = {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()}
    train = ["train", "--preset", "tiny", "--data", str(damaged), "--no-progress", "--devices",
             "cpu", "--threads", "1", "--steps", "2"]  # fmt: skip
    cases = [
        [*train, "--classes", "0", "1", "--run", str(old), "--overwrite"],
        [*train, "--classes", "0", "--run", str(tmp_path / "new")],
        [*train, "--classes", "1", "--run", str(tmp_path / "other")],
    ]
    results = run_cases(tmp_path, cases)
    for result in results[:2]:
        said_in_one_line(result, damaged, "a pixel of class 0")
        assert "class 0 (0)'s images differ from the digest stored" in result["stderr"]
    assert {p.relative_to(old): p.read_bytes() for p in old.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "new").exists()
    assert results[2]["rc"] == 0, results[2]["stderr"][-2000:]


def test_anova_of_pixels_a_damaged_chunk_index_reads_as_zeros_is_strict_json():
    """A damaged B-tree of the images' chunks can read a chunk as zeros without an error (not
    detected, like pixel damage): anova's F then grew so large that scipy's log10 p was -inf,
    which JSON cannot hold (a ValueError traceback). It is null now, as F is for no spread."""
    from distcgan.anova import ClassMoments, one_way

    one = np.ones(1)
    moments = [ClassMoments(900, one * k, one * 9.0) for k in range(2)]
    (row,) = one_way(moments)
    assert row["F"] > 1000 and row["p"] == 0 and row["log10_p"] is None
    json.dumps(row, allow_nan=False)


def test_a_damaged_sample_file_is_said_in_one_line(files, tmp_path):
    rng = np.random.default_rng(SEED + 1)
    src, net = files["samples"], files["net"]
    positions, _, refused = hdf5_positions(src, rng)
    copies = [flipped(src, tmp_path / f"samples{i}.h5", p) for i, p in enumerate(positions)]

    def evaluate(f: Path, i: int) -> list[str]:
        out = tmp_path / f"eval{i}.json"
        return ["evaluate", "--samples", str(f), "--network", str(net), "--devices", "cpu",
                "--splits", "2", "--no-progress", "--json", str(out)]  # fmt: skip

    cases = [evaluate(f, i) for i, f in enumerate((src, *copies))]
    results = run_cases(tmp_path, cases)
    assert results[0]["rc"] == 0, results[0]["stderr"][-2000:]
    base = json.loads((tmp_path / "eval0.json").read_text())
    for i, (pos, copy, result) in enumerate(zip(positions, copies, results[1:]), 1):
        if result["rc"] != 0:
            said_in_one_line(result, copy, f"byte {pos}")
            continue
        assert own_lines(result["stderr"]) == [], (pos, result["stderr"][-2000:])
        assert pos not in refused, f"byte {pos} was not noticed"
        scores = json.loads((tmp_path / f"eval{i}.json").read_text())
        for key in ("is_mean", "is_splits", "n", "label_shares", "class_accuracy"):
            assert scores[key] == base[key], (pos, key)


def test_a_damaged_network_is_said_in_one_line(files, tmp_path):
    """A TorchScript file is a zip whose members torch reads without checking their CRC-32: a
    flipped byte in a weight changed the scores without a word; now the CRCs are checked."""
    rng = np.random.default_rng(SEED + 2)
    src, samples = files["net"], files["samples"]
    size = src.stat().st_size
    positions = [0, *spread(rng, 1, size - 1, PER_KIND - 2), size - 1]
    copies = [flipped(src, tmp_path / f"net{i}.pt", p) for i, p in enumerate(positions)]

    def evaluate(f: Path, i: int) -> list[str]:
        out = tmp_path / f"eval{i}.json"
        return ["evaluate", "--samples", str(samples), "--network", str(f), "--devices", "cpu",
                "--splits", "2", "--no-progress", "--json", str(out)]  # fmt: skip

    results = run_cases(tmp_path, [evaluate(f, i) for i, f in enumerate((src, *copies))])
    assert results[0]["rc"] == 0, results[0]["stderr"][-2000:]
    base = json.loads((tmp_path / "eval0.json").read_text())
    for i, (pos, copy, result) in enumerate(zip(positions, copies, results[1:]), 1):
        if result["rc"] != 0:
            said_in_one_line(result, copy, f"byte {pos}")
            continue
        assert own_lines(result["stderr"]) == [], (pos, result["stderr"][-2000:])
        scores = json.loads((tmp_path / f"eval{i}.json").read_text())
        for key in ("is_mean", "is_splits", "num_outputs", "feature_dim"):
            assert scores[key] == base[key], (pos, key)
    assert sum(r["rc"] != 0 for r in results[1:]) >= PER_KIND // 2  # the members' bytes


def test_a_damaged_export_is_said_in_one_line(files, tmp_path):
    """model.safetensors (its header, its metadata with the checksums, its weights) and
    config.json, each damaged at PER_KIND positions, given to `generate`."""
    rng = np.random.default_rng(SEED + 3)
    src = files["export"]
    weights = (src / "model.safetensors").read_bytes()
    header = 8 + int.from_bytes(weights[:8], "little")
    config_size = (src / "config.json").stat().st_size
    plan = [("model.safetensors", p) for p in spread(rng, 0, header, PER_KIND // 2)]
    plan += [("model.safetensors", p) for p in spread(rng, header, len(weights) - 1, 3)]
    plan += [("model.safetensors", len(weights) - 1)]
    plan += [("config.json", p) for p in [0, *spread(rng, 1, config_size, PER_KIND - 1)]]
    damaged = []
    for i, (name, pos) in enumerate(plan):
        copy = tmp_path / f"export{i}"
        shutil.copytree(src, copy, copy_function=os.link)  # then the one file is rewritten
        damaged.append(flipped(src / name, copy / name, pos))

    def generate(folder: Path, i: int) -> list[str]:
        out = tmp_path / f"grid{i}.png"
        return ["generate", "--model", str(folder), "--class", "0", "1", "--n", "3", "--out",
                str(out), "--devices", "cpu"]  # fmt: skip

    folders = [src, *(d.parent for d in damaged)]
    results = run_cases(tmp_path, [generate(f, i) for i, f in enumerate(folders)])
    assert results[0]["rc"] == 0, results[0]["stderr"][-2000:]
    for (name, pos), copy, result in zip(plan, damaged, results[1:]):
        # every byte matters: the checksums in the metadata cover the weights and config.json
        said_in_one_line(result, copy, f"{name} byte {pos}")


def checkpoint_positions(path: Path, rng: np.random.Generator) -> list[int]:
    """The first byte, the version digit, the checksum, then the payload spread to the end."""
    size = path.stat().st_size
    return [0, 21, 40, *spread(rng, 90, size - 1, PER_KIND - 4), size - 1]


def test_a_damaged_checkpoint_is_named_and_skipped(files, tmp_path):
    """`sample` names the damaged checkpoint.pt in its one line (the previous one stopped at
    step 2 of 4: finish with --resume); `train --resume` falls back to checkpoint.prev.pt and
    ends with the undamaged run's weights (stdout's warning names the file)."""
    rng = np.random.default_rng(SEED + 4)
    src = files["run"]
    current = Path("class_000") / "checkpoint.pt"
    positions = checkpoint_positions(src / current, rng)
    runs = []
    for i, pos in enumerate(positions):
        copy = tmp_path / f"run{i}"
        shutil.copytree(src, copy, copy_function=os.link)
        flipped(src / current, copy / current, pos)
        runs.append(copy)
    sample = "sample --per-class 2 --devices cpu --no-progress --run".split()
    cases = [[*sample, str(r), "--out", str(tmp_path / f"s{i}.h5")] for i, r in enumerate(runs)]
    resumed = []  # the version digit, and a byte of the payload: whole copies (train writes)
    for i in (1, len(runs) // 2):
        resumed.append(shutil.copytree(runs[i], tmp_path / f"resumed{i}"))
        flipped(src / current, resumed[-1] / current, positions[i])
    cases += [["train", "--run", str(r), "--resume", "--no-progress"] for r in resumed]
    results = run_cases(tmp_path, cases)
    for pos, r, result in zip(positions, runs, results):
        said_in_one_line(result, r / current, f"byte {pos}")
    want = read(src / current)
    for r, result in zip(resumed, results[len(runs) :]):
        assert result["rc"] == 0 and own_lines(result["stderr"]) == [], result["stderr"][-2000:]
        assert f"skipping damaged checkpoint {r / current}" in result["stdout"]
        got = read(r / current)
        assert got["step"] == want["step"] == 4
        assert all(torch.equal(want["G"][n], got["G"][n]) for n in want["G"])


def test_a_damaged_statistics_cache_is_said_in_one_line_or_computed_again(files, tmp_path):
    """`evaluate --data` caches the real images' statistics (eval/metrics/realstats.py); each of its
    datasets carries a fletcher32 checksum that HDF5 checks as it reads, so a flipped byte in
    them is one line naming the cache (it was a wrong FID without a word). Damage that makes
    the cache unreadable or its attributes differ has it computed again: the same scores."""
    rng = np.random.default_rng(SEED + 5)
    samples, data, net = files["samples"], files["data"], files["net"]

    def evaluate(stats: Path, i: int) -> list[str]:
        return ["evaluate", "--samples", str(samples), "--data", str(data), "--network",
                str(net), "--devices", "cpu", "--splits", "2", "--no-progress", "--stats-dir",
                str(stats), "--json", str(tmp_path / f"eval{i}.json")]  # fmt: skip

    first = run_cases(tmp_path, [evaluate(tmp_path / "stats0", 0)])[0]
    assert first["rc"] == 0, first["stderr"][-2000:]
    (cache,) = (tmp_path / "stats0").glob("*.h5")
    size = cache.stat().st_size
    assert string_heap(cache.read_bytes()) == range(0)  # no string HDF5 could loop on
    kept = list(range(1, size - 1))
    positions = [0, *(kept[i] for i in spread(rng, 0, len(kept), PER_KIND - 2)), size - 1]
    damaged = []
    for i, pos in enumerate(positions, 1):
        (tmp_path / f"stats{i}").mkdir()
        damaged.append(flipped(cache, tmp_path / f"stats{i}" / cache.name, pos))
    cases = [evaluate(tmp_path / f"stats{i}", i) for i in range(1, len(positions) + 1)]
    results = run_cases(tmp_path, cases)
    base = json.loads((tmp_path / "eval0.json").read_text())
    for i, (pos, copy, result) in enumerate(zip(positions, damaged, results), 1):
        if result["rc"] != 0:
            said_in_one_line(result, copy, f"byte {pos}")
            continue
        assert own_lines(result["stderr"]) == [], (pos, result["stderr"][-2000:])
        scores = json.loads((tmp_path / f"eval{i}.json").read_text())
        for key in ("fid", "per_class_fid", "is_mean"):
            assert scores[key] == base[key], (pos, key)
