"""The class-partitioned HDF5 data file: writing it, checking it, and reading one class.

Layout (also used for sample files):
  images         uint8 (N, H, W, C), rows sorted by label
  labels         int64 (N,)
  class_offsets  int64 (K+1,): class k is rows offsets[k]:offsets[k+1]
  class_names    fixed-length UTF-8 strings (K,), with a fletcher32 checksum
  class_digests  fixed-length strings (K,): BLAKE2b-128 (hex) of each class's image bytes, in
                 file order, with a fletcher32 checksum
  attributes     source and provenance (fixed-length UTF-8), resolution, format_version; a
                 sample file of an unconditional (gan) run also has unlabelled = 1: its "class
                 k" rows are not of class k, only the k-th share of the draws
A rank reads only the rows of its own classes; `images` is chunked a few rows at a time so that
such a read touches little more than those rows. A whole class read is checked against its
digest. The file holds no variable-length string: a damaged global heap (where HDF5 keeps them)
makes HDF5 loop for ever as it reads one. Format 1 files (class_names and source as
variable-length attributes, no digests) are still read: their strings in a child process with
a time limit. Leaves out: converters from raw datasets (see `data_prep/`).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distcgan.config import RESOLUTIONS
from distcgan.errors import UserError
from distcgan.mpi.context import format_table
from distcgan.run.atomic import atomic_path, atomic_write_bytes, check_free_space, storage_errors

FORMAT_VERSION = 2  # 1: class_names and source were variable-length strings; no digests
_UNCLOSABLE: list[object] = []  # HDF5 files left open after a failed write (see abort)
_REQUIRED = ("images", "labels", "class_offsets")
_REQUIRED_SINCE_2 = ("class_names", "class_digests")
UNLABELLED = "unlabelled"  # attribute of sample files whose rows have no class (gan runs)
# Attribute (JSON) of the files made by data_prep, sample and generate: the command, its options,
# its command line and the versions it ran with; sample's and generate's also when and where
# (env.provenance).
PROVENANCE = "provenance"
# Reading a format 1 file's variable-length strings, in a child process: a few KB, read in well
# under a second; a damaged global heap makes HDF5 loop for ever (H5HG__cache_heap_deserialize
# does not advance past a free-space object of size 0; tests/faults/test_damaged_strings.py).
STRINGS_TIMEOUT_S = 60.0


def _h5py():  # imported lazily: h5py pulls in a large library that not every command needs
    import h5py

    return h5py


@dataclass(frozen=True)
class DatasetInfo:
    """What a rank needs to know about a data file before reading any images."""

    path: str
    class_names: tuple[str, ...]
    counts: tuple[int, ...]
    resolution: int
    channels: int
    source: str
    size_bytes: int

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def remake_hint(self, resolution: int) -> str:
        """How to write this file again at `resolution` px (data.remake_hint)."""
        return remake_hint(self.path, resolution)

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "class_names": list(self.class_names),
            "counts": list(self.counts),
            "resolution": self.resolution,
            "channels": self.channels,
            "source": self.source,
            "size_bytes": self.size_bytes,
        }

    def describe(self) -> str:
        """What `distcgan info` prints: one line for the file, then a table of its classes."""
        rows = [
            {"class_id": k, "name": n, "images": c}
            for k, (n, c) in enumerate(zip(self.class_names, self.counts))
        ]
        return (
            f"{self.path}: {sum(self.counts)} images, {self.num_classes} classes, "
            f"{self.resolution}x{self.resolution}x{self.channels} uint8, source "
            f"{self.source!r}, {self.size_bytes / 1e6:.1f} MB on disk\n"
            + format_table(rows, ["class_id", "name", "images"])
        )


def _fix_hint(path: str) -> str:
    return f"prepare {path} with python -m data_prep (docs/data.md)"


# What h5py raises, wherever it meets damage inside a file (damage_said)
_DAMAGE = (OSError, KeyError, RuntimeError, ValueError, TypeError, IndexError, AttributeError)


@contextlib.contextmanager
def damage_said(path: str | os.PathLike[str]) -> Iterator[None]:
    """h5py's errors on a file damaged inside as one line naming it. A flipped byte in the
    file's metadata (object headers, B-trees, heaps) surfaces wherever that part is read, as a
    KeyError, RuntimeError, OSError, ValueError, TypeError or IndexError (tests/faults/
    test_damaged_anywhere.py), or as an AttributeError where a damaged link names an object of
    another kind (a named datatype where `images` was). Pixels are checked by the class
    digests (`_check_digest`), the names and digests by their fletcher32 checksums; a flipped
    byte in the source attribute reads as another value and is not noticed."""
    try:
        yield
    except _DAMAGE as exc:
        said = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        raise UserError(
            f"data file {path} cannot be read, it is damaged ({said}): write it again "
            "(python -m data_prep, or distcgan sample for a sample file) or copy it again"
        ) from exc


def read_info(path: str) -> DatasetInfo:
    """Open `path` and check the layout (names, dtypes, shapes, offsets) without reading images."""
    if Path(path).is_dir():
        raise UserError(
            f"data file {path} is a folder: give the .h5 file that python -m data_prep wrote in it"
        )
    if not Path(path).is_file():
        raise UserError(f"data file {path} does not exist: {_fix_hint(path)} or fix --data")
    h5py = _h5py()
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise UserError(
            f"data file {path} is not a readable HDF5 file ({exc}): it may be truncated or "
            f"corrupt; {_fix_hint(path)}"
        ) from exc
    with f, damage_said(path):
        version = int(f.attrs.get("format_version", 1))
        if version > FORMAT_VERSION:
            raise UserError(
                f"data file {path} has format_version {version}, newer than this distcgan "
                f"understands ({FORMAT_VERSION}): upgrade distcgan or re-create the file"
            )
        missing = [name for name in _REQUIRED + _REQUIRED_SINCE_2 * (version > 1) if name not in f]
        if missing:
            raise UserError(
                f"data file {path} has no '{missing[0]}' dataset, so it is not in the "
                f"class-partitioned layout of format {version}: {_fix_hint(path)}"
            )
        offsets = np.asarray(f["class_offsets"][...])
        h, c = _check_arrays(path, f["images"], f["labels"], offsets)
        _check_labels(path, np.asarray(f["labels"][...]), offsets)
        strings = string_attrs(path, f, ("class_names", "source"))
        if version > 1:  # fixed-length strings in a dataset, and a digest per class
            strings["class_names"] = f["class_names"][...]
            if f["class_digests"].shape != (offsets.size - 1,):
                raise UserError(
                    f"data file {path} is damaged: {f['class_digests'].shape} class digests "
                    f"for {offsets.size - 1} classes; {_fix_hint(path)}"
                )
        names = _check_attrs(path, strings.get("class_names"), f.attrs, offsets.size - 1, h)
        return DatasetInfo(
            path=str(path),
            class_names=names,
            counts=tuple(int(x) for x in np.diff(offsets)),
            resolution=h,
            channels=int(c),
            source=_text(strings.get("source", "")),
            size_bytes=os.path.getsize(path),
        )


def _text(value: Any) -> str:
    """A string as h5py gives it (str, bytes or numpy bytes), as str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def fixed_string(value: str) -> np.bytes_:
    """`value` as HDF5 stores it without its global heap: a fixed-length UTF-8 string."""
    return np.bytes_(value.encode())


def string_attrs(path: str | os.PathLike[str], f: Any, names: Sequence[str]) -> dict[str, Any]:
    """The attributes `names` of the open file `f` that it has: those of fixed length read here,
    variable-length ones (format 1 files) in a child process with a time limit, because HDF5
    reads them from the file's global heap, and loops for ever on a damaged one; h5py holds
    the GIL meanwhile, so no thread of this process could end it."""
    string_type = _h5py().h5t.TypeStringID
    found, aside = {}, []
    for name in names:
        if name not in f.attrs:
            continue
        kind = f.attrs.get_id(name).get_type()
        if isinstance(kind, string_type) and kind.is_variable_str():
            aside.append(name)
        else:
            found[name] = f.attrs[name]
    return {**found, **(_strings_aside(path, aside) if aside else {})}


_READ_STRINGS = """
import json, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    got = {n: f.attrs[n] for n in sys.argv[2:]}
text = lambda x: x.decode() if isinstance(x, bytes) else str(x)
print(json.dumps({n: [text(x) for x in v] if hasattr(v, "shape") and v.shape else text(v)
                  for n, v in got.items()}))
"""


def _strings_aside(path: str | os.PathLike[str], names: list[str]) -> dict[str, Any]:
    """Read the variable-length string attributes `names` of `path` in a child process (a fresh
    interpreter: no fork of an MPI process), ended after STRINGS_TIMEOUT_S."""
    cmd = [sys.executable, "-c", _READ_STRINGS, os.fspath(path), *names]
    fix = "write it again (python -m data_prep, or distcgan sample for a sample file) or copy it"
    try:
        done = subprocess.run(
            cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=STRINGS_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"data file {path} cannot be read, it is damaged (reading its strings "
            f"{', '.join(names)} did not end in {STRINGS_TIMEOUT_S:.0f} s: HDF5 loops on a "
            f"damaged global heap): {fix} again"
        ) from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"data file {path} cannot be read, it is damaged ({said}): {fix} again")
    return json.loads(done.stdout)


def _check_arrays(path: str, images: Any, labels: Any, offsets: np.ndarray) -> tuple[int, int]:
    """The images' side and channels, once the three arrays agree with the layout."""
    if images.dtype != np.uint8 or images.ndim != 4:
        raise UserError(
            f"data file {path}: images must be uint8 (N, H, W, C), got {images.dtype} "
            f"{images.shape}; {_fix_hint(path)}"
        )
    n, h, w, c = images.shape
    if h != w or c not in (1, 3):
        raise UserError(
            f"data file {path}: images must be square with 1 or 3 channels, got "
            f"(H, W, C) = {(h, w, c)}; {_fix_hint(path)}"
        )
    if labels.shape != (n,) or offsets.ndim != 1 or offsets.size < 2:
        raise UserError(
            f"data file {path}: labels must be (N,) = ({n},) and class_offsets (K+1,), got "
            f"{labels.shape} and {offsets.shape}; {_fix_hint(path)}"
        )
    if offsets[0] != 0 or offsets[-1] != n or np.any(np.diff(offsets) < 0):
        raise UserError(
            f"data file {path}: class_offsets must rise from 0 to N={n}, got "
            f"{offsets[:4].tolist()}...{offsets[-1]}; {_fix_hint(path)}"
        )
    return h, c


def _check_labels(path: str, labels: np.ndarray, offsets: np.ndarray) -> None:
    """Every row's label is the class its offsets put it in: the whole file is checked here, on
    one process, before a run is created or an old one deleted (a bad label was found only when
    a rank loaded its class: by then --overwrite had removed the old run). Reading the labels
    costs 8 bytes a row: 10 MB for ImageNet's 1.28 million images."""
    k = offsets.size - 1
    expected = np.repeat(np.arange(k), np.diff(offsets))
    bad = np.flatnonzero(labels != expected)
    if bad.size:
        row = int(bad[0])
        said = bad_label(row, int(labels[row]), int(expected[row]), k)
        raise UserError(f"data file {path}: {said}")


def bad_label(row: int, label: int, class_id: int, num_classes: int) -> str:
    """What is wrong with `label` at `row`, which class_offsets put in class `class_id`."""
    ids, fix = f"class ids run 0..{num_classes - 1}", "re-create the file with python -m data_prep"
    if label < 0:
        return f"row {row} has label {label}, which is no class ({ids}); {fix}"
    if label >= num_classes:
        return f"row {row} has label {label}, out of range ({ids}); {fix}"
    return (
        f"row {row} has label {label} but class_offsets put it in class {class_id}: the rows are "
        f"not sorted by label, or the offsets are wrong; {fix}"
    )


def _check_attrs(path: str, names: Any, attrs: Any, k: int, h: int) -> tuple[str, ...]:
    """The class names (default "0".."K-1"), once they and the resolution agree with the data."""
    if names is None:
        names = [str(i) for i in range(k)]
    names = tuple(_text(x) for x in np.asarray(names).reshape(-1))
    if len(names) != k:
        raise UserError(
            f"data file {path}: {len(names)} class_names for {k} classes; {_fix_hint(path)}"
        )
    resolution = int(attrs.get("resolution", h))
    if resolution != h:
        raise UserError(
            f"data file {path}: attribute resolution={resolution} but images are {h} px"
        )
    return names


SAMPLE_SOURCES = ("distcgan-sample:", "distcgan-generate:")  # the `source` of the files we draw


def remake_hint(path: str, resolution: int) -> str:
    """How to write the data file `path` again at `resolution` px: a data_prep command that
    works, where what made the file is known (data_prep's provenance, with a --src that is
    there, or the embedded digits), writing a new file beside it; else where to read how."""
    out = Path(path).with_name(f"{Path(path).stem}-{resolution}px.h5")
    try:
        with _h5py().File(path, "r") as f:
            args = _data_prep_args(string_attrs(path, f, (PROVENANCE, "source")))
    except (OSError, UserError):
        args = None
    if args is None or out.exists():
        sizes = ", ".join(str(r) for r in RESOLUTIONS)
        return f"write it again at one of {sizes} px with data_prep's --resolution (docs/data.md)"
    command = shlex.join(
        ["python", "-m", "data_prep", *args, "--out", str(out), "--resolution", str(resolution)]
    )
    then = f"pass --data {shlex.quote(str(out))}"
    return f"write it again at {resolution} px with {command}, then {then}"


def _data_prep_args(strings: Mapping[str, Any]) -> list[str] | None:
    """data_prep's arguments that made a file, less --out, --resolution and --overwrite: from
    its provenance (None if its --src is not there) or its source; None when neither says."""
    try:
        made = json.loads(strings.get(PROVENANCE) or "null")
    except ValueError:
        made = None
    if not (isinstance(made, dict) and made.get("command") == "data_prep"):
        return ["digits"] if _text(strings.get("source", "")) == "sklearn-digits" else None
    src = (made.get("options") or {}).get("src")
    if src and not Path(src).exists():
        return None
    args, skip = [], False
    for arg in (str(a) for a in made.get("argv", [])[3:]):  # after python -m data_prep
        if skip or arg == "--overwrite" or arg.startswith(("--out=", "--resolution=")):
            skip = False
            continue
        skip = arg in ("--out", "--resolution")
        if not skip:
            args.append(arg)
    return args


def check_replaceable(path: str | Path, flag: str) -> None:
    """Refuse to write a sample file over an existing file that is not one: the run's training
    data (`sample --out data.h5` replaced it without a word), another data set, anything else.
    A sample file that `sample` or `generate` wrote is replaced, as a rerun expects."""
    if not Path(path).is_file():
        return
    source = None
    try:
        with _h5py().File(path, "r") as f:
            source = string_attrs(path, f, ["source"]).get("source")
    except (OSError, UserError):
        pass
    source = _text(source) if source is not None else None
    if not (isinstance(source, str) and source.startswith(SAMPLE_SOURCES)):
        what = f"a data set ({source})" if isinstance(source, str) else "not a sample file"
        raise UserError(
            f"{flag} {path} exists and is {what}: only a sample file of distcgan sample or "
            "generate is replaced; give another file name"
        )


def class_digest(path: str, class_id: int) -> str:
    """BLAKE2b (128 bit) of class `class_id`'s image bytes, in file order: what DatasetWriter
    hashes as it writes the class and keeps in `class_digests` (run/resume.py's fingerprint),
    checked against it. Read about 64 MB at a time, so memory stays bounded however large the
    class."""
    digest = hashlib.blake2b(digest_size=16)
    with damage_said(path), _h5py().File(path, "r") as f:
        lo, hi = (int(x) for x in f["class_offsets"][class_id : class_id + 2])
        images = f["images"]
        rows = max(1, (64 << 20) // int(np.prod(images.shape[1:])))
        for start in range(lo, hi, rows):
            digest.update(np.ascontiguousarray(images[start : min(hi, start + rows)]).data)
        _check_digest(path, f, class_id, digest.hexdigest())
    return digest.hexdigest()


def _digest(images: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(images).data, digest_size=16).hexdigest()


def _check_digest(path: str, f: Any, class_id: int, digest: str) -> None:
    """Refuse a class whose images do not hash to the digest stored when it was written (format
    2: a flipped pixel is otherwise read as another value); a format 1 file has none."""
    if "class_digests" not in f:
        return
    stored = f["class_digests"][class_id]
    if _text(stored) != digest:
        name = _text(f["class_names"][class_id]) if "class_names" in f else str(class_id)
        raise UserError(
            f"data file {path} is damaged: class {class_id} ({name})'s images differ from the "
            "digest stored when the file was written; write it again (python -m data_prep, or "
            "distcgan sample for a sample file) or copy it again"
        )


def is_unlabelled(path: str) -> bool:
    """Whether a (sample) file's labels only number the draws of an unconditional G."""
    with damage_said(path), _h5py().File(path, "r") as f:
        return bool(f.attrs.get(UNLABELLED, 0))


def load_class(
    path: str, class_id: int, part: tuple[int, int] | None = None, verify: bool = True
) -> np.ndarray:
    """Read the rows of one class (uint8, (n, H, W, C)), checking their labels, and, when the
    whole class is read and `verify`, its digest (one more pass over its bytes: BLAKE2b runs at
    0.3 to 1 GB/s; a caller that has just checked it with class_digest can pass False).

    With `part` = (j, g), only rows j, j+g, j+2g... of the class: rank j's shard in a group of g.
    """
    h5py = _h5py()
    with damage_said(path), h5py.File(path, "r") as f:
        offsets = f["class_offsets"]
        k = offsets.shape[0] - 1
        if not 0 <= class_id < k:
            raise UserError(f"class id {class_id} is out of range: {path} has classes 0..{k - 1}")
        lo, hi = (int(x) for x in offsets[class_id : class_id + 2])
        if hi == lo:
            raise UserError(
                f"class {class_id} of {path} is empty: drop it with --classes or re-create the file"
            )
        step = 1
        if part is not None:
            lo, step = lo + part[0], part[1]
            if lo >= hi:
                raise UserError(
                    f"class {class_id} of {path} has {hi - lo + part[0]} images, too few for "
                    f"{part[1]} ranks to share: use fewer ranks or --no-data-shard"
                )
        labels = f["labels"][lo:hi:step]
        if np.any(labels != class_id):  # read_info checked them: the file changed since
            i = int(np.flatnonzero(labels != class_id)[0])
            said = bad_label(lo + i * step, int(labels[i]), class_id, k)
            raise UserError(f"data file {path}: {said}")
        images = np.asarray(f["images"][lo:hi:step])
        if part is None and verify:
            _check_digest(path, f, class_id, _digest(images))
        return images


class DatasetWriter:
    """Write a data file class by class (memory bounded by one class), atomically.

    Classes must be added in order 0..K-1; the file appears at `path` only when `close()`
    succeeds. Use as a context manager: on an exception nothing is written. With `in_memory`
    the HDF5 file is built in memory and written with plain file I/O at the end (sample files:
    a full disk then gives a clean error, which HDF5's own writes cannot promise); otherwise
    each class checks the free space before it is written, and `verify`, if given, is called
    with the finished temporary file before it is moved into place (an error there leaves
    nothing at `path`).
    """

    def __init__(  # noqa: PLR0913 - the file's layout (5) and how it is written (3, optional)
        self,
        path: str | os.PathLike[str],
        class_names: Sequence[str],
        resolution: int,
        channels: int,
        source: str,
        in_memory: bool = False,
        verify: Callable[[Path], None] | None = None,
        attrs: Mapping[str, object] | None = None,
    ) -> None:
        self.path = Path(path)
        self.attrs = dict(attrs or {})
        self.in_memory = in_memory
        self.verify = verify
        self.class_names = [str(n) for n in class_names]
        self.resolution, self.channels, self.source = resolution, channels, source
        self.offsets = [0]
        self.digests: list[str] = []  # of each class's images, as written (class_digests)
        h5py = _h5py()
        if in_memory:
            self._buffer = io.BytesIO()
            self._file = h5py.File(self._buffer, "w")
        else:
            self._atomic = atomic_path(self.path)
            self._tmp = self._atomic.__enter__()
            self._file = h5py.File(self._tmp, "w")
        shape = (resolution, resolution, channels)
        # About 64 KiB per chunk: a class read touches at most two chunks beyond its own rows.
        rows = max(1, 65536 // int(np.prod(shape)))
        self._images = self._file.create_dataset(
            "images",
            shape=(0, *shape),
            maxshape=(None, *shape),
            dtype=np.uint8,
            chunks=(rows, *shape),
        )
        self._labels = self._file.create_dataset(
            "labels", shape=(0,), maxshape=(None,), dtype=np.int64, chunks=(max(rows, 1024),)
        )

    def add_class(self, class_id: int, images: np.ndarray) -> None:
        if class_id != len(self.offsets) - 1:
            raise ValueError(f"classes must be added in order: expected {len(self.offsets) - 1}")
        expected = (self.resolution, self.resolution, self.channels)
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != expected:
            raise ValueError(
                f"class {class_id}: images must be uint8 (n, {expected}), got "
                f"{images.dtype} {images.shape}"
            )
        if not self.in_memory:
            check_free_space(self._tmp.parent, images.nbytes * 9 // 8, f"class {class_id}")
        lo, hi = self.offsets[-1], self.offsets[-1] + images.shape[0]
        self._images.resize(hi, axis=0)
        self._labels.resize(hi, axis=0)
        self._images[lo:hi] = images
        self._labels[lo:hi] = class_id
        self.offsets.append(hi)
        self.digests.append(_digest(images))

    def close(self) -> None:
        """Finish the file and move it into place (fsync, rename); on failure nothing appears."""
        try:
            if len(self.offsets) - 1 != len(self.class_names):
                raise ValueError(
                    f"{len(self.offsets) - 1} classes written but {len(self.class_names)} named"
                )
            f = self._file
            f.create_dataset("class_offsets", data=np.asarray(self.offsets, dtype=np.int64))
            # No variable-length string (see the module's docstring); names and digests carry
            # a checksum that HDF5 checks as it reads them.
            names = np.array([n.encode() for n in self.class_names], dtype=bytes)
            f.create_dataset("class_names", data=names, chunks=True, fletcher32=True)
            digests = np.array([d.encode() for d in self.digests], dtype="S32")
            f.create_dataset("class_digests", data=digests, chunks=True, fletcher32=True)
            f.attrs["source"] = fixed_string(self.source)
            f.attrs["resolution"] = self.resolution
            f.attrs["format_version"] = FORMAT_VERSION
            for key, value in self.attrs.items():
                f.attrs[key] = fixed_string(value) if isinstance(value, str) else value
            f.close()  # flushes: a full disk often shows here
            if self.verify is not None and not self.in_memory:
                self.verify(self._tmp)
        except BaseException as exc:
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if self.in_memory:
            atomic_write_bytes(self.path, self._buffer.getvalue())
        else:
            self._atomic.__exit__(None, None, None)

    def abort(self, exc: BaseException | None = None) -> None:
        """Drop the half-written file; `path` is left as it was."""
        if self.in_memory:
            self._file.close()
            return
        if isinstance(exc, OSError):
            # After a failed write HDF5 can crash while closing the file (HDF5 2.0.0): keep the
            # handle open instead; the caller is about to report the error and exit.
            _UNCLOSABLE.append(self._file)
        else:
            self._file.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc is None:
            self.close()
            return
        self.abort(exc)
        if isinstance(exc, OSError):
            with storage_errors(self.path):
                raise exc


def write_dataset(
    path: str | os.PathLike[str],
    images: np.ndarray,
    labels: np.ndarray,
    class_names: Sequence[str],
    source: str,
) -> None:
    """Write whole arrays (any label order) as a data file; a convenience for small datasets."""
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(f"images must be uint8 (N, H, W, C), got {images.dtype} {images.shape}")
    order = np.argsort(labels, kind="stable")
    images, labels = images[order], np.asarray(labels)[order]
    with DatasetWriter(path, class_names, images.shape[1], images.shape[3], source) as w:
        for k in range(len(class_names)):
            w.add_class(k, images[labels == k])
