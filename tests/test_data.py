"""The HDF5 data-file layout: writing, checking (each bad layout by message), reading a class."""

from __future__ import annotations

from hashlib import blake2b

import h5py
import numpy as np
import pytest

from distcgan.data import DatasetWriter, load_class, read_info, write_dataset
from distcgan.errors import UserError


def _images(n: int, res: int = 16, c: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, res, res, c), dtype=np.uint8)


def test_round_trip_sorts_by_label_and_records_the_layout(tmp_path):
    labels = np.array([2, 0, 1, 2, 0, 2])
    images = _images(6)
    path = tmp_path / "d.h5"
    write_dataset(path, images, labels, ["a", "b", "c"], source="test")
    with h5py.File(path) as f:
        assert f["images"].dtype == np.uint8 and f["images"].shape == (6, 16, 16, 1)
        assert f["labels"][...].tolist() == [0, 0, 1, 2, 2, 2]
        assert f["labels"].dtype == np.int64 and f["class_offsets"].dtype == np.int64
        assert f["class_offsets"][...].tolist() == [0, 2, 3, 6]
        assert f["class_names"][...].tolist() == [b"a", b"b", b"c"]
        assert f.attrs["source"] == b"test" and f.attrs["resolution"] == 16
        assert f.attrs["format_version"] == 2
        digests = [blake2b(images[labels == k].data, digest_size=16).hexdigest() for k in range(3)]
        assert f["class_digests"][...].tolist() == [d.encode() for d in digests]
    info = read_info(str(path))
    assert info.counts == (2, 1, 3) and info.class_names == ("a", "b", "c")
    assert info.channels == 1 and info.resolution == 16
    np.testing.assert_array_equal(load_class(str(path), 2), images[labels == 2])
    np.testing.assert_array_equal(load_class(str(path), 0), images[labels == 0])


def test_images_are_chunked_a_few_rows_at_a_time(tmp_path):
    path = tmp_path / "d.h5"
    write_dataset(path, _images(300, 32, 3), np.repeat(np.arange(3), 100), list("abc"), "t")
    with h5py.File(path) as f:
        rows = f["images"].chunks[0]
        assert f["images"].chunks[1:] == (32, 32, 3)
        assert rows * 32 * 32 * 3 <= 65536 and rows < 100  # a class read touches its own rows


def test_a_failed_write_leaves_no_file(tmp_path):
    path = tmp_path / "d.h5"
    with pytest.raises(RuntimeError):
        with DatasetWriter(path, ["a", "b"], 16, 1, "t") as w:
            w.add_class(0, _images(3))
            raise RuntimeError("converter failed")
    assert list(tmp_path.iterdir()) == []


def test_missing_file(tmp_path):
    with pytest.raises(UserError, match="data file .*nope.h5 does not exist: prepare .* --data"):
        read_info(str(tmp_path / "nope.h5"))


def test_not_hdf5_and_truncated(tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not an hdf5 file at all" * 10)
    with pytest.raises(UserError, match="is not a readable HDF5 file .*truncated or corrupt"):
        read_info(str(junk))
    good = tmp_path / "good.h5"
    write_dataset(good, _images(50), np.zeros(50, np.int64), ["a"], "t")
    cut = tmp_path / "cut.h5"
    cut.write_bytes(good.read_bytes()[:2000])
    with pytest.raises(UserError, match="is not a readable HDF5 file"):
        read_info(str(cut))


def _raw(path, **datasets):
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            f[name] = value


def test_wrong_layouts_each_get_their_message(tmp_path):
    p = tmp_path / "x.h5"
    _raw(p, images=_images(4), labels=np.zeros(4, np.int64))
    with pytest.raises(UserError, match="has no 'class_offsets' dataset, so it is not in the"):
        read_info(str(p))
    _raw(
        p,
        images=_images(4).astype(np.float32),
        labels=np.zeros(4, np.int64),
        class_offsets=np.array([0, 4]),
    )
    with pytest.raises(UserError, match=r"images must be uint8 \(N, H, W, C\), got float32"):
        read_info(str(p))
    _raw(p, images=_images(4), labels=np.zeros(4, np.int64), class_offsets=np.array([0, 3]))
    with pytest.raises(UserError, match="class_offsets must rise from 0 to N=4"):
        read_info(str(p))
    _raw(
        p,
        images=np.zeros((4, 16, 8, 1), np.uint8),
        labels=np.zeros(4, np.int64),
        class_offsets=np.array([0, 4]),
    )
    with pytest.raises(UserError, match="images must be square with 1 or 3 channels"):
        read_info(str(p))


def test_class_reads_check_range_emptiness_and_sorting(tmp_path):
    p = tmp_path / "d.h5"
    write_dataset(p, _images(4), np.array([0, 0, 2, 2]), ["a", "b", "c"], "t")
    assert read_info(str(p)).counts == (2, 0, 2)
    with pytest.raises(UserError, match="class 1 of .* is empty: drop it with --classes"):
        load_class(str(p), 1)
    with pytest.raises(UserError, match="class id 3 is out of range: .* has classes 0..2"):
        load_class(str(p), 3)
    _raw(p, images=_images(4), labels=np.array([0, 1, 0, 1]), class_offsets=np.array([0, 2, 4]))
    said = "row 1 has label 1 but class_offsets put it in class 0: the rows are not sorted by"
    with pytest.raises(UserError, match=said):
        load_class(str(p), 0)


def test_digits_converter_writes_the_real_digits(tmp_path):
    from sklearn.datasets import load_digits

    from data_prep.__main__ import main

    out = tmp_path / "d.h5"
    assert main(["digits", "--out", str(out), "--resolution", "16"]) == 0
    info = read_info(str(out))
    target = load_digits().target
    assert info.counts == tuple(int((target == k).sum()) for k in range(10))
    assert sum(info.counts) == 1797 and info.resolution == 16 and info.channels == 1
    zeros = load_class(str(out), 0)
    assert zeros.max() == 255 and zeros.min() == 0
    # The upsampled image keeps the 8x8 original: block means track the source pixels.
    src = load_digits().images[target == 0][0] * 255 / 16
    blocks = zeros[0, :, :, 0].reshape(8, 2, 8, 2).mean(axis=(1, 3))
    assert np.corrcoef(blocks.ravel(), src.ravel())[0, 1] > 0.95


def test_digits_converter_options(tmp_path):
    from data_prep.__main__ import main

    out = tmp_path / "d.h5"
    assert (
        main(
            [
                "digits",
                "--out",
                str(out),
                "--resolution",
                "32",
                "--rgb",
                "--classes",
                "7",
                "3",
                "--max-per-class",
                "20",
            ]
        )
        == 0
    )
    info = read_info(str(out))
    assert info.class_names == ("7", "3") and info.counts == (20, 20)
    assert info.channels == 3 and info.resolution == 32
    assert main(["digits", "--out", str(out), "--classes", "12", "--overwrite"]) == 2


def test_a_flipped_pixel_is_found_by_its_class_digest(tmp_path):
    """The digest stored per class (format 2) is checked wherever a whole class is read or
    hashed; a shard cannot be (train checks every class's digest at launch instead), nor a
    read that asks not to be; another class is untouched."""
    from distcgan.data import class_digest

    path = tmp_path / "d.h5"
    images = _images(6)
    write_dataset(path, images, np.array([0, 0, 0, 1, 1, 1]), ["a", "b"], "t")
    with h5py.File(path, "r+") as f:
        f["images"][4, 3, 3, 0] ^= 1  # a flipped bit in class 1 (b)
    said = r"data file .*d.h5 is damaged: class 1 \(b\)'s images differ from the digest stored"
    with pytest.raises(UserError, match=said):
        load_class(str(path), 1)
    with pytest.raises(UserError, match=said):
        class_digest(str(path), 1)
    assert load_class(str(path), 1, part=(0, 2)).shape[0] == 2
    assert load_class(str(path), 1, verify=False)[1, 3, 3, 0] == images[4, 3, 3, 0] ^ 1
    np.testing.assert_array_equal(load_class(str(path), 0), images[:3])
    assert class_digest(str(path), 0) == blake2b(images[:3].data, digest_size=16).hexdigest()


def test_an_object_of_another_kind_under_a_dataset_name_is_one_line(tmp_path):
    """A flipped byte in a link can make `images` name a named datatype (found by flipping each
    metadata byte of the digits file: an AttributeError traceback from read_info)."""
    p = tmp_path / "x.h5"
    with h5py.File(p, "w") as f:
        f["images"] = np.dtype("uint8")  # a named datatype, not a dataset
        f["labels"], f["class_offsets"] = np.zeros(4, np.int64), np.array([0, 4])
    with pytest.raises(UserError, match=r"data file .*x.h5 cannot be read, it is damaged \("):
        read_info(str(p))
    with pytest.raises(UserError, match=r"data file .*x.h5 cannot be read, it is damaged \("):
        load_class(str(p), 0)
