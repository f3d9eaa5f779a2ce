"""Each source from tiny files in its real format: images, labels, class order and names come out
as put in (exactly at the native size; through the documented resize otherwise), and every bad
file gives a one-line error naming the file, with nothing written."""

from __future__ import annotations

import dataclasses
import gzip
import pickle
import pickletools

import h5py
import numpy as np
import pytest
from helpers import (
    cifar_rows,
    photo,
    random_images,
    save_as,
    write_cifar,
    write_mnist,
    write_npz,
)
from PIL import Image

from data_prep.__main__ import main
from data_prep.resize import decode_file, fit_array, fit_square
from distcgan.data import load_class, read_info


def _convert(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured


def _fails(capsys, message, *args) -> str:
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("data_prep: error: ")
    return err


def _by_class(images, labels, keep):
    """The expected file: for each kept class in order, its rows in source order."""
    return [images[labels == k] for k in keep]


def _assert_file(path, expected, names, resolution, channels, source):
    info = read_info(str(path))
    assert info.class_names == tuple(names)
    assert info.counts == tuple(len(e) for e in expected)
    assert (info.resolution, info.channels, info.source) == (resolution, channels, source)
    for k, images in enumerate(expected):
        np.testing.assert_array_equal(load_class(str(path), k), images)


def _same_content(a, b):
    """The same attributes but the record of what made each (its --out, --src), the same data."""
    with h5py.File(a) as fa, h5py.File(b) as fb:
        assert sorted(fa.attrs) == sorted(fb.attrs)
        for key in set(fa.attrs) - {"provenance"}:
            assert np.array_equal(fa.attrs[key], fb.attrs[key]), key
        for name in ("images", "labels", "class_offsets", "class_names", "class_digests"):
            np.testing.assert_array_equal(fa[name][...], fb[name][...])


# ---- MNIST / Fashion-MNIST (IDX) --------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_idx_round_trip(tmp_path, capsys, gz):
    rng = np.random.default_rng(0)
    images = random_images(rng, 40, 28, 1)[..., 0]
    labels = rng.permutation(np.arange(40) % 10).astype(np.uint8)
    test_images, test_labels = random_images(rng, 20, 28, 1)[..., 0], np.arange(20) % 10
    write_mnist(tmp_path / "raw", "train", images, labels, gz)
    write_mnist(tmp_path / "raw", "t10k", test_images, test_labels.astype(np.uint8), gz)
    out = tmp_path / "m.h5"
    _convert(capsys, "mnist", "--src", str(tmp_path), "--out", str(out))  # finds raw/
    big = fit_array(images[..., None], 32)  # 28 -> 32: the shared helper (bilinear)
    _assert_file(out, _by_class(big, labels, range(10)), map(str, range(10)), 32, 1, "mnist:train")

    # The test split, at 16 px, RGB, two classes by id, at most 1 image each.
    _convert(
        capsys, "fashion-mnist", "--src", str(tmp_path / "raw"), "--out", str(out), "--overwrite",
        "--split", "test", "--resolution", "16", "--rgb", "--classes", "9", "Bag",
        "--max-per-class", "1",
    )  # fmt: skip
    small = fit_array(test_images[..., None], 16).repeat(3, axis=3)
    expected = [small[test_labels == 9][:1], small[test_labels == 8][:1]]
    _assert_file(out, expected, ["Ankle boot", "Bag"], 16, 3, "fashion-mnist:test")


def test_mnist_bad_files(tmp_path, capsys):
    rng = np.random.default_rng(1)
    images, labels = random_images(rng, 10, 28, 1)[..., 0], (np.arange(10) % 10).astype(np.uint8)
    write_mnist(tmp_path, "train", images, labels, gz=False)
    args = ["mnist", "--src", str(tmp_path), "--out", str(tmp_path / "m.h5")]
    img, lab = tmp_path / "train-images-idx3-ubyte", tmp_path / "train-labels-idx1-ubyte"
    good_img, good_lab = img.read_bytes(), lab.read_bytes()

    img.write_bytes(good_img[:-5])
    _fails(capsys, f"{img} has 7851 bytes but its header (10, 28, 28) needs 7856", *args)
    img.write_bytes(good_lab)  # a labels file where the images should be
    _fails(capsys, f"{img} is not an IDX file of unsigned bytes with 3 dimension(s)", *args)
    img.write_bytes(good_img)
    lab.write_bytes(good_lab[:8] + bytes([3] * 9 + [12]))
    _fails(capsys, f"{lab}: label 12 is outside 0..9", *args)
    lab.write_bytes(good_lab[:7] + bytes([9]) + bytes(9))
    _fails(capsys, f"{img} holds 10 images but {lab} 9 labels: the two files are not a pair", *args)
    lab.write_bytes(good_lab)
    # A truncated .gz is found only while streaming: the conversion stops, nothing is written.
    img.unlink()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(good_img)[:-30])
    _fails(capsys, "train-images-idx3-ubyte.gz", *args)
    assert not (tmp_path / "m.h5").exists()
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


# ---- CIFAR-10 / CIFAR-100 (pickles) -----------------------------------------------------------

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer"] + [
    "dog", "frog", "horse", "ship", "truck"
]  # fmt: skip


def _cifar10_files(rng, per_batch=12):
    """Five train batches and a test batch; every class in data_batch_1 and in test_batch."""
    files, images, labels = {}, [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = random_images(rng, per_batch, 32)
        y = rng.integers(0, 10, per_batch)
        if name in ("data_batch_1", "test_batch"):
            y[:10] = rng.permutation(10)
        files[name] = {"batch_label": b"training batch", "labels": y.tolist(),
                       "data": cifar_rows(x), "filenames": [b"x.png"] * per_batch}  # fmt: skip
        if name != "test_batch":
            images.append(x)
            labels.append(y)
    files["batches.meta"] = {"label_names": [n.encode() for n in CIFAR10_NAMES],
                             "num_cases_per_batch": per_batch, "num_vis": 3072}  # fmt: skip
    return files, np.concatenate(images), np.concatenate(labels)


def test_cifar10_from_archive_and_folder(tmp_path, capsys):
    rng = np.random.default_rng(2)
    files, images, labels = _cifar10_files(rng, per_batch=12)
    # Archive members out of order (the real archive is not sorted): rows still go in batch order.
    order = ["data_batch_4", "test_batch", "data_batch_2", "batches.meta", "data_batch_5",
             "data_batch_1", "data_batch_3"]  # fmt: skip
    tgz = write_cifar(tmp_path, files, "cifar-10-batches-py", "cifar-10-python.tar.gz", order)
    folder = write_cifar(tmp_path / "x", files, "cifar-10-batches-py", None)
    a, b = tmp_path / "a.h5", tmp_path / "b.h5"
    _convert(capsys, "cifar10", "--src", str(tgz), "--out", str(a))
    present = [k for k in range(10) if (labels == k).any()]
    assert present == list(range(10))
    _assert_file(a, _by_class(images, labels, range(10)), CIFAR10_NAMES, 32, 3, "cifar10:train")
    _convert(capsys, "cifar10", "--src", str(folder.parent), "--out", str(b))  # parent folder
    _same_content(a, b)

    # The test split; names as classes; a cap; 64 px through the shared (area-filter) resize.
    _convert(
        capsys, "cifar10", "--src", str(tgz), "--out", str(a), "--overwrite", "--split", "test",
        "--classes", "ship", "cat", "--max-per-class", "1", "--resolution", "16",
    )  # fmt: skip
    tx = np.asarray(files["test_batch"]["data"]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    ty = np.asarray(files["test_batch"]["labels"])
    expected = [fit_array(tx[ty == k][:1], 16) for k in (8, 3)]
    _assert_file(a, expected, ["ship", "cat"], 16, 3, "cifar10:test")


def test_cifar_passes_within_a_memory_budget_give_the_same_file(tmp_path):
    from data_prep.cifar import open_cifar
    from data_prep.rows import RowsOut, write_rows
    from data_prep.select import plan_groups, select_classes

    files, _, _ = _cifar10_files(np.random.default_rng(3), per_batch=12)
    tgz = write_cifar(tmp_path, files, "cifar-10-batches-py", "cifar-10-python.tar.gz")
    src = open_cifar(tgz, "cifar10", "train")
    passes = []
    src_counting = dataclasses.replace(src, read=lambda: (passes.append(1), src.read())[1])
    sel = select_classes(src.names, None, None)
    counts = write_rows(src, sel, RowsOut(tmp_path / "one.h5", 32))
    budget = 20 * 3072  # 20 images: 60 in 10 classes need at least three passes
    write_rows(src_counting, sel, RowsOut(tmp_path / "many.h5", 32, budget_bytes=budget))
    _same_content(tmp_path / "one.h5", tmp_path / "many.h5")
    assert len(passes) == len(plan_groups(counts, 3072, budget)) >= 3


def test_cifar100_fine_and_coarse(tmp_path, capsys):
    rng = np.random.default_rng(4)
    fine_names = [f"f{i}" for i in range(100)]
    coarse_names = [f"c{i}" for i in range(20)]
    x = random_images(rng, 120, 32)
    fine = np.r_[np.arange(100), rng.integers(0, 100, 20)]
    coarse = fine // 5
    files = {
        "train": {"data": cifar_rows(x), "fine_labels": fine.tolist(),
                  "coarse_labels": coarse.tolist(), "filenames": [b"a"] * 120},
        "test": {"data": cifar_rows(x[:3]), "fine_labels": [0, 1, 2], "coarse_labels": [0, 0, 0]},
        "meta": {"fine_label_names": [n.encode() for n in fine_names],
                 "coarse_label_names": [n.encode() for n in coarse_names]},
    }  # fmt: skip
    tgz = write_cifar(tmp_path, files, "cifar-100-python", "cifar-100-python.tar.gz")
    out = tmp_path / "c.h5"
    _convert(capsys, "cifar100", "--src", str(tgz), "--out", str(out))
    _assert_file(out, _by_class(x, fine, range(100)), fine_names, 32, 3, "cifar100:train")
    _convert(capsys, "cifar100", "--src", str(tgz), "--out", str(out), "--coarse", "--overwrite")
    _assert_file(out, _by_class(x, coarse, range(20)), coarse_names, 32, 3, "cifar100:train:coarse")


def test_cifar_bad_files(tmp_path, capsys):
    files, _, _ = _cifar10_files(np.random.default_rng(5))
    src = write_cifar(tmp_path, files, "cifar-10-batches-py", None)
    args = ["cifar10", "--src", str(src), "--out", str(tmp_path / "c.h5")]
    batch = src / "data_batch_3"
    good = batch.read_bytes()

    # A pickle that would run code when loaded is refused, and nothing runs.
    class Evil:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    evil = pickle.dumps({b"data": Evil()}, protocol=2)
    # the name the pickle gives `open`: io.open up to Python 3.11, _io.open from 3.12
    ref = [arg for op, arg, _ in pickletools.genops(evil) if op.name == "GLOBAL"][-1]
    assert ref.replace(" ", ".") in ("io.open", "_io.open")
    batch.write_bytes(evil)
    _fails(
        capsys,
        f"{batch} is not a readable CIFAR pickle (it refers to {ref.replace(' ', '.')}, which",
        *args,
    )
    assert not (tmp_path / "pwned").exists()
    batch.write_bytes(good[: len(good) // 2])
    _fails(capsys, f"{batch} is not a readable CIFAR pickle", *args)
    obj = dict(files["data_batch_3"])
    batch.write_bytes(pickle.dumps({b"data": obj["data"][:, :100], b"labels": obj["labels"]}))
    _fails(capsys, f"{batch}: data (12, 100) and (12,) labels do not match (n, 3072) and", *args)
    batch.write_bytes(pickle.dumps({b"data": obj["data"], b"labels": [10] * 12}))
    _fails(capsys, "data_batch_3 has label 10 but the meta file names 10 classes", *args)
    batch.unlink()
    _fails(capsys, f"{src} has no data_batch_3: is it the extracted CIFAR folder?", *args)
    (tmp_path / "bad.tar.gz").write_bytes(b"not gzip at all")
    args[2] = str(tmp_path / "bad.tar.gz")
    _fails(capsys, f"cannot read {tmp_path / 'bad.tar.gz'} as a .tar.gz", *args)
    assert not (tmp_path / "c.h5").exists()


# ---- downsampled ImageNet (npz) ---------------------------------------------------------------


def test_imagenet_npz_round_trip_streamed_in_chunks(tmp_path, capsys, monkeypatch):
    import data_prep.npz as npz

    monkeypatch.setattr(npz, "_CHUNK_BYTES", 5 * 3072)  # several chunks per batch file
    rng = np.random.default_rng(6)
    batches = []
    for i in (1, 2, 3):
        x = random_images(rng, 13, 32)
        y = rng.integers(1, 5, 13)  # 1-based labels, 4 classes
        y[:4] = [1, 2, 3, 4]
        write_npz(tmp_path / f"train_data_batch_{i}.npz", x, y, compressed=i == 2)
        batches.append((x, y))
    write_npz(tmp_path / "val_data.npz", batches[0][0][:6], [4, 3, 2, 1, 1, 4])
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches]) - 1
    out = tmp_path / "n.h5"
    _convert(capsys, "imagenet-npz", "--src", str(tmp_path), "--out", str(out))
    names = ["label1", "label2", "label3", "label4"]
    _assert_file(out, _by_class(x, y, range(4)), names, 32, 3, "imagenet32-npz:train")

    (tmp_path / "map_clsloc.txt").write_text(
        "n02119789 1 kit_fox\nn02100735 2 English_setter\nn02110185 3 Siberian_husky\n"
        "n02096294 4 Australian_terrier\n"
    )
    _convert(
        capsys, "imagenet-npz", "--src", str(tmp_path), "--out", str(out), "--overwrite",
        "--split", "test",
        "--resolution", "16", "--classes", "n02096294 Australian_terrier", "0",
    )  # fmt: skip
    vx, vy = batches[0][0][:6], np.array([4, 3, 2, 1, 1, 4]) - 1
    expected = [fit_array(vx[vy == 3], 16), fit_array(vx[vy == 0], 16)]
    names = ["n02096294 Australian_terrier", "n02119789 kit_fox"]
    _assert_file(out, expected, names, 16, 3, "imagenet32-npz:test")


def test_imagenet_npz_bad_batches(tmp_path, capsys):
    rng = np.random.default_rng(7)
    x = random_images(rng, 6, 32)
    args = ["imagenet-npz", "--src", str(tmp_path), "--out", str(tmp_path / "n.h5")]
    write_npz(tmp_path / "train_data_batch_1.npz", x, [1, 2, 3, 1, 2, 3])
    write_npz(tmp_path / "train_data_batch_3.npz", x, [1, 2, 3, 1, 2, 3])
    _fails(capsys, "has train_data_batch_3.npz but not train_data_batch_2.npz", *args)
    write_npz(tmp_path / "train_data_batch_2.npz", x, [0, 1, 2, 1, 2, 3])
    _fails(capsys, "train_data_batch_2.npz: label 0 found; downsampled ImageNet labels are", *args)
    write_npz(tmp_path / "train_data_batch_2.npz", x, [1, 2, 5, 1, 2, 5])
    _fails(capsys, "no images of label 4 (labels run to 5): the download is incomplete", *args)
    np.savez(tmp_path / "train_data_batch_2.npz", data=x.reshape(6, -1)[:, :3000], labels=[1] * 6)
    _fails(capsys, "train_data_batch_2.npz: rows of 3000 values are not 3 x S x S images", *args)
    (tmp_path / "train_data_batch_2.npz").write_bytes(b"PK\x03\x04 broken")
    _fails(capsys, "cannot read", *args)
    assert not (tmp_path / "n.h5").exists()


# ---- image folders and the ImageNet training folder -------------------------------------------


def _image_folder(root, rng):
    """Three classes of images in every form: PNG at 32 px (kept exactly), JPEGs of other sizes,
    grayscale and CMYK JPEGs, a PNG named .JPEG, RGBA and palette images, and a text file.
    Returns {class: [(path, the RGB picture saved), ...]}."""
    made = {}
    for cls, kinds in {
        "n01440764": ["png32", "rgb", "cmyk"],
        "n01443537": ["gray", "disguised", "rgba"],
        "n01484850": ["png32", "palette", "rgb"],
    }.items():
        for i, kind in enumerate(kinds):
            path = root / cls / f"{cls}_{i}.JPEG"
            img = photo(rng, 40 + 17 * i, 33 + 5 * i)
            if kind == "png32":
                path = path.with_suffix(".png")
                img = Image.fromarray(random_images(rng, 1, 32)[0])
                save_as(img, path, "png")
            elif kind == "disguised":
                save_as(img, path, "png")
            elif kind == "rgba":
                path = path.with_suffix(".png")
                img.convert("RGBA").save(path)
            elif kind == "palette":
                path = path.with_suffix(".gif")
                img.convert("P").save(path)
            else:
                save_as(img, path, kind)
            made.setdefault(cls, []).append((path, img))
        (root / cls / "notes.txt").write_text("not an image")
    return made


def _decoded(made, cls, size):
    return np.stack([decode_file(p, size) for p, _ in sorted(made[cls], key=lambda x: x[0])])


def test_folder_source_converts_every_image_mode(tmp_path, capsys):
    rng = np.random.default_rng(8)
    made = _image_folder(tmp_path / "imgs", rng)
    out = tmp_path / "f.h5"
    _convert(capsys, "folder", "--src", str(tmp_path / "imgs"), "--out", str(out),
             "--resolution", "32")  # fmt: skip
    expected = [_decoded(made, c, 32) for c in sorted(made)]
    _assert_file(out, expected, sorted(made), 32, 3, "folder:imgs")
    # Sorted file names: n01440764_0.png is the first image of class 0, stored exactly.
    png_path, png = made["n01440764"][0]
    assert png_path.name == "n01440764_0.png"
    np.testing.assert_array_equal(load_class(str(out), 0)[0], np.asarray(png))
    # Grayscale, CMYK, disguised PNG and RGBA come out as the colours that were saved.
    for cls, k in (("n01440764", 2), ("n01443537", 0), ("n01443537", 1), ("n01443537", 2)):
        _, img = made[cls][k]  # file k of the class is row k (names end in _k)
        if k == 0 and cls == "n01443537":
            img = img.convert("L").convert("RGB")
        ref = np.asarray(fit_square(img, 32), dtype=float)
        got = load_class(str(out), sorted(made).index(cls))[k]
        assert np.abs(got - ref).mean() < 6, (cls, k)


def test_imagenet_names_order_and_unreadable_images(tmp_path, capsys):
    rng = np.random.default_rng(9)
    root = tmp_path / "ILSVRC" / "Data" / "CLS-LOC" / "train"
    made = _image_folder(root, rng)
    (root / "n01443537" / "broken.JPEG").write_bytes(b"\xff\xd8\xff not really a jpeg")
    (tmp_path / "LOC_synset_mapping.txt").write_text(
        "n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n"
        "n01484850 great white shark, white shark\n"
    )
    out = tmp_path / "i.h5"
    args = ["imagenet", "--src", str(root), "--out", str(out), "--resolution", "16"]
    err = _fails(capsys, "class folder", *args)
    assert "n01443537: 1 of 4 images are unreadable, more than --max-unreadable 0.01" in err
    assert "broken.JPEG: UnidentifiedImageError" in err
    assert not out.exists()

    # Within the threshold the file is written and the skipped image reported; --classes by
    # wnid and by id, in that order.
    printed = _convert(capsys, *args, "--max-unreadable", "0.3", "--classes", "n01484850", "1")
    names = ["n01484850 great white shark, white shark", "n01443537 goldfish, Carassius auratus"]
    expected = [_decoded(made, n.split()[0], 16) for n in names]
    _assert_file(out, expected, names, 16, 3, "imagenet:train")
    assert f"(names: {tmp_path / 'LOC_synset_mapping.txt'})" in printed.out
    assert "data_prep: warning: skipped 1 unreadable image(s) in 1 class(es): " in printed.err
    assert "broken.JPEG" in printed.err


def test_a_failed_conversion_keeps_the_previous_file_and_leaves_no_temporary(tmp_path, capsys):
    made = _image_folder(tmp_path / "imgs", np.random.default_rng(11))
    out = tmp_path / "f.h5"
    args = ["folder", "--src", str(tmp_path / "imgs"), "--out", str(out), "--resolution", "16"]
    _convert(capsys, *args)
    before = out.read_bytes()
    # The last class fails after the first two were written to the temporary file.
    for path, _ in made["n01484850"]:
        path.write_bytes(b"damaged")
    _fails(capsys, "class folder", *args, "--overwrite")  # replaced only once converted
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.h5", "imgs"]


def test_imagenet_folder_checks(tmp_path, capsys):
    rng = np.random.default_rng(10)
    root = tmp_path / "train"
    _image_folder(root, rng)
    args = ["imagenet", "--src", str(root), "--out", str(tmp_path / "i.h5")]
    (tmp_path / "LOC_synset_mapping.txt").write_text(
        "n01440764 tench\nn01443537 goldfish\nn01484850 shark\nn01491361 tiger shark\n"
    )
    _fails(capsys, f"{root} has 3 of the 4 classes in", *args)
    (tmp_path / "LOC_synset_mapping.txt").write_text("n01440764 tench\nn01440764 tench\n")
    _fails(capsys, "LOC_synset_mapping.txt:2 repeats a WordNet id", *args)
    (tmp_path / "LOC_synset_mapping.txt").unlink()
    (root / "extra").mkdir()
    _fails(capsys, f"{root / 'extra'} is not a WordNet id folder", *args)
    (root / "extra").rmdir()
    (root / "n01491361").mkdir()
    _fails(capsys, f"class folder {root / 'n01491361'} has no image files", *args)
    assert not (tmp_path / "i.h5").exists()
