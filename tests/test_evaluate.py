"""`distcgan evaluate` in one process: scores against a naive in-test computation, the cached
real statistics, --run against --samples, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import KEYS, close, copy_data, make_samples, naive_fid, naive_is, save_tiny
from torch import nn

from distcgan.cli import main
from distcgan.data import load_class, read_info, write_dataset

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:FutureWarning")


@pytest.fixture(scope="session")
def tiny_net(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("net") / "tiny.pt")


@pytest.fixture(scope="session")
def samples_file(tmp_path_factory, digits_file) -> Path:
    return make_samples(digits_file, tmp_path_factory.mktemp("samples") / "samples.h5")


def outputs(net_path: Path, path: Path) -> tuple[dict[int, torch.Tensor], dict[int, np.ndarray]]:
    """Per class: the TorchScript module's (float64) logits and features, computed directly."""
    module = torch.jit.load(str(net_path)).eval()
    logits, features = {}, {}
    for k, count in enumerate(read_info(str(path)).counts):
        if count == 0:
            continue
        x = torch.from_numpy(load_class(str(path), k)).permute(0, 3, 1, 2).float() / 127.5 - 1
        with torch.no_grad():
            logits[k], features[k] = module(x).double(), module.features(x).double().numpy()
    return logits, features


def reference(net_path: Path, samples: Path, data: Path, splits: int, seed: int) -> dict:
    """IS, FID, per-class FID and accuracy the straightforward way: every vector in memory."""
    fake_logits, fake = outputs(net_path, samples)
    _, real = outputs(net_path, data)
    probs = torch.softmax(torch.cat(list(fake_logits.values())), 1).numpy()
    is_mean, is_std = naive_is(probs, splits, seed)
    correct = {k: (v.argmax(1) == k).double().mean().item() for k, v in fake_logits.items()}
    return {
        "is_mean": is_mean,
        "is_std": is_std,
        "fid": naive_fid(np.concatenate(list(real.values())), np.concatenate(list(fake.values()))),
        "per_class_fid": {str(k): naive_fid(real[k], fake[k]) for k in fake},
        "accuracy": correct,
    }


def test_scores_match_a_straightforward_computation(
    tmp_path, digits_file, samples_file, tiny_net, capsys
):
    data = copy_data(digits_file, tmp_path / "data")
    out = tmp_path / "eval.json"
    args = ["evaluate", "--samples", str(samples_file), "--data", str(data)]
    args += ["--network", str(tiny_net), "--splits", "4", "--seed", "5", "--json", str(out)]
    assert main(args + ["--batch-size", "7"]) == 0
    got = json.loads(out.read_text())
    assert KEYS <= set(got)
    assert (got["network"], got["n"], got["splits"], got["feature_dim"]) == ("tiny.pt", 120, 4, 8)
    assert got["split_sizes"] == [30, 30, 30, 30]
    ref = reference(tiny_net, samples_file, data, splits=4, seed=5)
    assert got["is_mean"] > 1.5  # a score that can tell right from wrong
    assert close(got["is_mean"], ref["is_mean"]) and close(got["is_std"], ref["is_std"], 1e-5)
    assert close(got["fid"], ref["fid"])
    for k, fid in ref["per_class_fid"].items():
        assert close(got["per_class_fid"][k], fid), k
    acc = got["class_accuracy"]
    assert acc["per_class"] == {str(k): pytest.approx(v) for k, v in ref["accuracy"].items()}
    assert acc["overall"] == pytest.approx(np.mean(list(ref["accuracy"].values())))
    # The share of all samples the network assigns to each class (its outputs are the classes).
    fake_logits, _ = outputs(tiny_net, samples_file)
    labels = torch.cat(list(fake_logits.values())).argmax(1).numpy()
    shares = np.bincount(labels, minlength=10) / len(labels)
    assert got["label_shares"] == {str(k): pytest.approx(v) for k, v in enumerate(shares)}
    assert len(set(labels)) > 1 and all("predicted" not in r for r in got["classes"])
    top, never = int(np.argmax(shares)), [str(k) for k in range(10) if shares[k] == 0]
    said = f"the network's labels of the samples (class ids), most drawn first: {top} "
    out = capsys.readouterr().out
    assert f"{said}{shares[top]:.1%}, " in out and never  # the tiny network never says some
    assert f"; never drawn: {len(never)} class(es) ({', '.join(never)})\n" in out
    from distcgan.eval.metrics.result import _shares_line

    every = _shares_line({"label_shares": {"0": 0.5, "1": 0.3, "2": 0.15, "3": 0.05}})
    assert every == [
        "the network's labels of the samples (class ids), most drawn first: 0 50.0%, 1 30.0%, "
        "2 15.0%; least 3 5.0%"
    ]


def brute_force_pr(real: np.ndarray, fake: np.ndarray, k: int = 3) -> tuple[float, float]:
    """Improved precision and recall, one point at a time, in float64 numpy."""

    def radius(points: np.ndarray, i: int) -> float:  # k-th nearest other point
        d = sorted(np.linalg.norm(points[j] - points[i]) for j in range(len(points)) if j != i)
        return d[k - 1]

    def inside(q: np.ndarray, points: np.ndarray, radii: list[float]) -> bool:
        return any(np.linalg.norm(q - p) <= r for p, r in zip(points, radii))

    real_r = [radius(real, i) for i in range(len(real))]
    fake_r = [radius(fake, i) for i in range(len(fake))]
    precision = np.mean([inside(f, real, real_r) for f in fake])
    recall = np.mean([inside(r, fake, fake_r) for r in real])
    return float(precision), float(recall)


def test_precision_recall_match_a_brute_force_computation(
    tmp_path, digits_file, samples_file, tiny_net
):
    data = copy_data(digits_file, tmp_path / "data")
    out = tmp_path / "eval.json"
    args = ["evaluate", "--samples", str(samples_file), "--data", str(data)]
    assert main([*args, "--network", str(tiny_net), "--splits", "2", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    _, fake = outputs(tiny_net, samples_file)
    _, real = outputs(tiny_net, data)
    for k in (0, 3, 9):  # per class: the class's real images against its samples
        p, r = brute_force_pr(real[k], fake[k])
        assert (got["per_class_precision"][str(k)], got["per_class_recall"][str(k)]) == (
            pytest.approx(p),
            pytest.approx(r),
        )
    # Overall: every sample (120) against every real image (the digits: under both caps).
    p, r = brute_force_pr(np.concatenate(list(real.values())), np.concatenate(list(fake.values())))
    assert (got["precision"], got["recall"]) == (pytest.approx(p), pytest.approx(r))
    assert 0 < got["precision"] < 1 and 0 < got["recall"] < 1  # numbers that can be wrong


def test_a_class_with_more_real_images_than_precision_recall_take_gives_a_seeded_subset(
    tmp_path, digits_file, samples_file, tiny_net, monkeypatch
):
    """A class with more real images than PR_REAL_PER_CLASS (1,000; 50 here, under the digits'
    ~180 a class, as it is under MNIST's 6,000, CIFAR-10's 5,000 or ImageNet's 1,300): precision
    and recall take a seeded subset of them. Its stream was missing from plan.STREAMS, so every
    such evaluate, and --score-every, ended in KeyError: 'pr-real'."""
    from distcgan.eval.metrics import features
    from distcgan.eval.metrics.networks import load_network

    monkeypatch.setattr(features, "PR_REAL_PER_CLASS", 50)
    data = copy_data(digits_file, tmp_path / "data")
    out = tmp_path / "eval.json"
    args = ["evaluate", "--samples", str(samples_file), "--data", str(data), "--splits", "2"]
    assert main([*args, "--network", str(tiny_net), "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    _, fake = outputs(tiny_net, samples_file)
    _, real = outputs(tiny_net, data)
    net = load_network(str(tiny_net), None, "cpu", 1, 16)

    def subset(seed):  # the rows of class 3's own features that real_features took
        picked = features.real_features(net, str(data), 3, seed, 64).double().numpy()
        dist = np.linalg.norm(picked[:, None] - real[3][None], axis=2)
        assert (dist.min(1) < 1e-4).all()
        return picked, sorted(dist.argmin(1))

    picked, rows = subset(0)
    assert len(rows) == len(set(rows)) == 50 and subset(0)[1] == rows and subset(1)[1] != rows
    p, r = brute_force_pr(picked, fake[3])  # evaluate's own: the subset of its --seed (0)
    assert (got["per_class_precision"]["3"], got["per_class_recall"]["3"]) == (
        pytest.approx(p),
        pytest.approx(r),
    )


def test_precision_recall_edge_cases():
    from distcgan.eval.metrics.precision_recall import precision_recall, proportional_take

    x = np.random.default_rng(0).normal(size=(40, 5))
    assert precision_recall(x, x) == (1.0, 1.0)  # a set against itself
    far = x + 100.0
    assert precision_recall(x, far) == (0.0, 0.0)  # disjoint manifolds
    with pytest.raises(ValueError, match="needs more than 3 real and fake"):
        precision_recall(x, x[:3])
    assert proportional_take([5, 10], 100) == [5, 10]
    assert proportional_take([300, 100, 0], 100) == [75, 25, 0]


def test_fid_of_some_classes_is_against_the_real_images_of_those_classes(
    tmp_path, digits_file, samples_file, tiny_net
):
    # A sample file of classes 2 and 5 only (the others empty), as a run of two classes gives.
    info = read_info(str(samples_file))
    x = np.concatenate([load_class(str(samples_file), k) for k in (2, 5)])
    subset = tmp_path / "subset.h5"
    write_dataset(subset, x, np.repeat([2, 5], 12), info.class_names, "test")
    data = copy_data(digits_file, tmp_path / "data")
    out = tmp_path / "e.json"
    args = ["evaluate", "--samples", str(subset), "--data", str(data), "--network", str(tiny_net)]
    assert main([*args, "--splits", "2", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    _, fake = outputs(tiny_net, subset)
    _, real = outputs(tiny_net, data)
    expected = naive_fid(np.concatenate([real[2], real[5]]), np.concatenate([fake[2], fake[5]]))
    assert got["fid"] == pytest.approx(expected, rel=1e-5)  # float32 per-class statistics
    assert set(got["per_class_fid"]) == {"2", "5"} and got["n"] == 24


def test_real_statistics_are_cached_beside_the_data_keyed_by_content_and_network(
    tmp_path, digits_file, samples_file, tiny_net, capsys
):
    data = copy_data(digits_file, tmp_path / "data")
    args = ["evaluate", "--samples", str(samples_file), "--data", str(data), "--splits", "2"]
    assert main([*args, "--network", str(tiny_net), "--json", str(tmp_path / "a.json")]) == 0
    caches = sorted(data.parent.glob("digits16.fid-tiny-*.h5"))
    assert len(caches) == 1 and "computing them for 1797 images" in capsys.readouterr().out
    stamp = caches[0].stat().st_mtime_ns
    assert main([*args, "--network", str(tiny_net), "--json", str(tmp_path / "b.json")]) == 0
    assert "(cached)" in capsys.readouterr().out and caches[0].stat().st_mtime_ns == stamp
    a, b = (json.loads((tmp_path / f"{x}.json").read_text()) for x in "ab")
    assert a["fid"] == b["fid"] and a["per_class_fid"] == b["per_class_fid"]
    assert not list(data.parent.glob(".*parts*"))  # the per-rank part files are gone
    caches[0].write_bytes(caches[0].read_bytes()[:1000])  # a truncated cache is computed again
    again = ["--json", str(tmp_path / "b.json"), "--overwrite"]
    assert main([*args, "--network", str(tiny_net), *again]) == 0
    assert "computing them" in capsys.readouterr().out
    assert json.loads((tmp_path / "b.json").read_text())["fid"] == a["fid"]
    # Another network (same name, other weights) and changed data content: new caches.
    other = save_tiny(tmp_path / "tiny.pt", seed=1)
    assert main([*args, "--network", str(other), "--json", str(tmp_path / "c.json")]) == 0
    assert len(list(data.parent.glob("digits16.fid-tiny-*.h5"))) == 2
    info = read_info(str(digits_file))
    images = np.concatenate([load_class(str(digits_file), k) for k in range(10)])
    labels = np.repeat(np.arange(10), info.counts)
    write_dataset(data, images[::-1].copy(), labels[::-1].copy(), info.class_names, "reversed")
    assert main([*args, "--network", str(other), "--json", str(tmp_path / "d.json")]) == 0
    assert "computing them" in capsys.readouterr().out
    assert len(list(data.parent.glob("digits16.fid-tiny-*.h5"))) == 3


def test_evaluating_a_run_scores_what_sample_writes(tmp_path, digits_file, tiny_net, capsys):
    from helpers import tiny_args

    run = tmp_path / "run"
    assert main(tiny_args(digits_file, run, "--classes", "3", "8")) == 0
    samples = tmp_path / "s.h5"
    assert main(["sample", "--run", str(run), "--per-class", "10", "--out", str(samples)]) == 0
    common = ["--network", str(tiny_net), "--splits", "5", "--seed", "0"]
    assert main(["evaluate", "--run", str(run), "--n", "20", *common]) == 0
    from_run = json.loads((run / "evaluate-tiny.json").read_text())  # default: in the run
    assert main(["evaluate", "--samples", str(samples), "--data", str(digits_file), *common]) == 0
    from_file = json.loads((tmp_path / "s.evaluate-tiny.json").read_text())  # beside the file
    assert from_run["data"] == str(digits_file)  # the run's own data file by default
    for key in ("is_mean", "is_std", "fid", "per_class_fid", "class_accuracy"):
        assert from_run[key] == from_file[key], key
    assert set(from_run["per_class_fid"]) == {"3", "8"}
    odd = tmp_path / "odd.json"
    assert main(["evaluate", "--run", str(run), "--n", "21", *common, "--json", str(odd)]) == 0
    assert [c["n"] for c in json.loads(odd.read_text())["classes"]] == [11, 10]


def test_no_data_means_no_fid_and_a_foreign_network_no_accuracy(tmp_path, samples_file):
    torch.manual_seed(0)
    net = tmp_path / "seven.pt"
    torch.jit.save(torch.jit.script(nn.Sequential(nn.Flatten(), nn.Linear(256, 7))), str(net))
    out = tmp_path / "e.json"
    args = ["evaluate", "--samples", str(samples_file), "--network", str(net), "--splits", "3"]
    assert main([*args, "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["fid"] is None and got["per_class_fid"] is None and got["class_accuracy"] is None
    assert got["label_shares"] is None  # 7 outputs: not the data's 10 classes
    assert got["feature_dim"] == 7 and got["is_mean"] >= 1.0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--n", "10"], "--n applies to --run; --samples scores every image of the sample file"),
        (["--splits", "500"], "--splits 500 is more than the 120 samples: lower --splits"),
        (["--run", "r"], "argument --run: not allowed with argument --samples"),
        (["--network", "inception-v4"], "--network inception-v4: no such file, and not one of"),
        (["--json", "/nope/e.json"], "--json /nope/e.json: folder /nope does not exist"),
        (["--json", "/"], "--json / is a folder: give a file name, such as /evaluate.json"),
        (["--seed", "-1"], "argument --seed: a seed is a whole number >= 0, got -1"),
        (["--seed", "1.5"], "argument --seed: a seed is a whole number >= 0, got '1.5'"),
    ],
)
def test_bad_evaluate_input_is_one_clear_line(samples_file, capsys, extra, message):
    assert main(["evaluate", "--samples", str(samples_file), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_mismatched_data_and_classifier_are_refused(tmp_path, digits_file, samples_file, capsys):
    names = [str(k) for k in range(10)]
    wrong_res = save_tiny(
        tmp_path / "r.pt", {"resolution": 32, "channels": 1, "class_names": names}
    )
    assert main(["evaluate", "--samples", str(samples_file), "--network", str(wrong_res)]) == 2
    assert "r.pt was trained on 32 px images with 1 channel(s)" in capsys.readouterr().err
    meta = {"resolution": 16, "channels": 1, "class_names": list("abcdefghij")}
    wrong_names = save_tiny(tmp_path / "n.pt", meta)
    assert main(["evaluate", "--samples", str(samples_file), "--network", str(wrong_names)]) == 2
    assert "was trained on classes ['a', 'b', 'c', 'd']..." in capsys.readouterr().err
    other = tmp_path / "other.h5"
    x = np.zeros((4, 16, 16, 1), np.uint8)
    write_dataset(other, x, np.array([0, 0, 1, 1]), ["x", "y"], "test")
    good = save_tiny(tmp_path / "t.pt")
    args = ["evaluate", "--samples", str(samples_file), "--network", str(good)]
    assert main([*args, "--data", str(other)]) == 2
    assert "pass the data file the run trained on (--data)" in capsys.readouterr().err
