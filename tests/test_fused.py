"""Fused class pairs (--fuse K): F classes trained at once as one network equal each class
trained alone.

Equality is checked where the arithmetic allows it to be exact, and it then is, bit for bit:
- oneDNN off: PyTorch's CPU convolution then runs a grouped convolution group by group with the
  kernels of an ungrouped one (oneDNN's grouped and ungrouped kernels round differently: 5e-7
  on G's first outputs);
- contiguous weights (no channels_last), which take the same kernels fused and alone;
- batches of a multiple of 16: element-wise kernels (the sigmoid in the loss) run blocks of 16
  floats vectorised and the rest scalar, which round differently, so a class's logits must sit
  in the same kind of block fused as alone.
Outside these, the fused and unfused runs round differently, and GAN training with Adam grows a
1-ulp difference to about 3e-3 of the weights within 10 steps (measured; see the README).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from helpers import member, spy_kernels, tiny_args

from distcgan.cli import main
from distcgan.config import tiny
from distcgan.plan import fused_groups, make_tasks
from distcgan.run.checkpoint import read
from distcgan.train import models
from distcgan.train.alone import AlonePair
from distcgan.train.fused import FusedPairs, auto_fuse, class_bytes, use_graphs
from distcgan.train.models import Discriminator, FusedLinear, Generator
from distcgan.train.pair import PairSpec, new_pair
from distcgan.train.step import STAT_KEYS, Batch

EXACT = dict(rtol=0, atol=0)


def _cfg(**kw):
    return dataclasses.replace(tiny(), channels_last=False, d_dropout=0.0, **kw)


def _alone(cfg, classes):
    """Each class's pair as the loop steps it alone (train/alone.AlonePair)."""
    tasks = make_tasks("per-class", classes)
    return [AlonePair(cfg, member(new_pair(PairSpec(cfg, t, 1, 10), "cpu", "cpu"))) for t in tasks]


def _fused(cfg, classes):
    """The same classes' pairs as the loop steps them fused (train/fused.FusedPairs)."""
    tasks = make_tasks("per-class", classes)
    pairs = [new_pair(PairSpec(cfg, t, 1, 10), "cpu", "cpu") for t in tasks]
    return FusedPairs(cfg, 1, [member(p) for p in pairs], ("cpu", "cpu"))


def _max_rel(a: dict, b: dict) -> float:
    worst = 0.0
    for name, x in a.items():
        y = b[name]
        if x.ndim == 0:
            assert int(x) == int(y), name  # num_batches_tracked, kept per class
            continue
        worst = max(
            worst, ((x.double() - y.double()).norm() / x.double().norm().clamp_min(1e-30)).item()
        )
    return worst


def test_fused_groups_are_balanced_and_in_order():
    assert [list(g) for g in fused_groups(10, 4)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [list(g) for g in fused_groups(3, 1)] == [[0], [1], [2]]
    assert [list(g) for g in fused_groups(3, 8)] == [[0, 1, 2]]
    assert fused_groups(0, 4) == []
    with pytest.raises(ValueError):
        fused_groups(3, 0)


@pytest.mark.parametrize("res", [16, 32])
def test_a_fused_network_computes_each_class_network(res, exact_cpu):
    torch.manual_seed(0)
    F, B = 3, 4
    alone_g = [Generator(100, 3, res) for _ in range(F)]
    alone_d = [Discriminator(3, res, dropout=0.0) for _ in range(F)]
    fused_g, fused_d = Generator(100, 3, res, fuse=F), Discriminator(3, res, dropout=0.0, fuse=F)
    for fused, nets in ((fused_g, alone_g), (fused_d, alone_d)):
        states = [n.state_dict() for n in nets]
        fused.load_state_dict(
            {k: (v if v.ndim == 0 else torch.stack([s[k] for s in states]).reshape(v.shape))
             for k, v in fused.state_dict().items()}
        )  # fmt: skip
    z = torch.randn(B, F * 100)
    images = fused_g(z)
    assert images.shape == (B, F * 3, res, res)
    logits = fused_d(images)
    assert logits.shape == (F, B, 1)
    for k in range(F):
        torch.testing.assert_close(
            images[:, 3 * k : 3 * k + 3], alone_g[k](z[:, 100 * k : 100 * (k + 1)]), **EXACT
        )
        torch.testing.assert_close(logits[k], alone_d[k](images[:, 3 * k : 3 * k + 3]), **EXACT)


@pytest.mark.parametrize(("fuse", "shape"), [(3, (5, 3 * 4, 2, 2)), (1, (5, 4, 2, 2))])
def test_linear_layers_as_batched_matmuls_compute_the_grouped_convolutions(fuse, shape):
    torch.manual_seed(0)
    layer = FusedLinear(fuse, 16, 7) if fuse > 1 else torch.nn.Linear(16, 7)
    x = torch.randn(shape)
    want = models.linear_conv(layer, x, fuse)
    got = models.linear_bmm(layer, x, fuse)
    assert got.shape == want.shape == (5, fuse * 7)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # class k's outputs are its own layer's on its own block
    k = fuse - 1
    alone = x[:, 4 * k : 4 * (k + 1)].flatten(1) @ layer.weight.reshape(fuse, 7, 16)[k].T
    alone += layer.bias.reshape(fuse, 7)[k]
    torch.testing.assert_close(got[:, 7 * k : 7 * (k + 1)], alone, rtol=1e-5, atol=1e-6)


def test_fused_linear_layers_are_batched_matmuls_on_a_gpu_and_grouped_convolutions_elsewhere(
    monkeypatch,
):
    """The device picks (measured on an H100: the batched matmul 1.04-1.20x faster; on a CPU
    the grouped convolution keeps a fused class's arithmetic that of the class alone). A GPU
    is stood in for by the CPU's device type; tests/test_gpu.py runs the real one."""
    assert models.BMM_DEVICES == ("cuda",)
    x = torch.randn(4, 3 * 8, 2, 2)
    fused, one = FusedLinear(3, 32, 5), torch.nn.Linear(8 * 4, 5)
    calls = spy_kernels(monkeypatch)
    models.linear_over_maps(fused, x, 3)
    models.linear_over_maps(one, x[:, :8], 1)
    assert calls == ["conv2d", "conv2d"]
    monkeypatch.setattr(models, "BMM_DEVICES", ("cpu",))
    calls.clear()
    models.linear_over_maps(fused, x, 3)
    models.linear_over_maps(one, x[:, :8], 1)  # one network keeps its convolution
    assert calls == ["baddbmm", "conv2d"]


def _weights(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: v.detach().clone() for n, v in net.state_dict().items() if "running" not in n}


def _update_gap(before: dict, a: dict, b: dict) -> float:
    """How far b's update from `before` is from a's, relative to a's (relative L2 over all
    weights): 0 for the same update, about 1.4 for an unrelated one."""
    gap = sum(((a[n] - b[n]).double().norm() ** 2).item() for n in before if before[n].ndim)
    size = sum(((a[n] - before[n]).double().norm() ** 2).item() for n in before if before[n].ndim)
    return (gap / size) ** 0.5


def test_fused_steps_with_batched_matmul_linear_layers_follow_each_class_alone(monkeypatch):
    """The fused step as a GPU runs it (its linear layers batched matmuls, which round unlike
    the grouped convolutions) gives each class the updates it gets alone, to rounding: over 3
    steps each class's weights moved as alone to within 2.2e-3 of their move (measured; the
    default CPU arithmetic's grouped convolutions: 2.0e-3), where a batched matmul that gave
    class k the weights of class k-1 moved them 1.4 of it away."""
    monkeypatch.setattr(models, "BMM_DEVICES", ("cpu",))
    cfg, classes = _cfg(batch_size=16), (0, 1, 2)
    alone, fp = _alone(cfg, classes), _fused(cfg, classes)
    before = [{r: _weights(getattr(a.members[0].pair, r)) for r in ("G", "D")} for a in alone]
    calls = spy_kernels(monkeypatch)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        reals = [torch.rand(16, 1, 16, 16, generator=gen) * 2 - 1 for _ in classes]
        zs = [torch.randn(16, 100, generator=gen) for _ in classes]
        for k, one in enumerate(alone):
            one.update([Batch(reals[k], None, zs[k], None)])
        fp.update([Batch(torch.cat(reals, 1), None, torch.cat(zs, 1), None)])
    assert "baddbmm" in calls
    for k in range(len(classes)):
        fp.store(k)
        for role in ("G", "D"):
            a = _weights(getattr(alone[k].members[0].pair, role))
            b = _weights(getattr(fp.members[k].pair, role))
            assert _update_gap(before[k][role], a, b) < 2e-2, (k, role)


@pytest.mark.parametrize("F, eps", [(2, 0.8), (3, 0.8), (5, 0.8), (3, 1e-5)])
def test_fused_steps_give_each_class_its_weights_alone(F, eps, exact_cpu):
    cfg = _cfg(batch_size=16, d_bn_eps=eps)
    classes = tuple(range(F))
    alone, fp = _alone(cfg, classes), _fused(cfg, classes)
    for D in [fp.D, *(one.members[0].pair.D for one in alone)]:  # --d-bn-eps reaches every D
        assert {m.eps for m in D.modules() if hasattr(m, "eps")} == {eps}
    gen = torch.Generator().manual_seed(1)
    for _ in range(12):
        reals = [torch.rand(16, 1, 16, 16, generator=gen) * 2 - 1 for _ in classes]
        zs = [torch.randn(16, 100, generator=gen) for _ in classes]
        for k, one in enumerate(alone):
            assert one.update([Batch(reals[k], None, zs[k], None)]).shape == (1, len(STAT_KEYS))
        fused = Batch(torch.cat(reals, 1), None, torch.cat(zs, 1), None)
        assert fp.update([fused]).shape == (F, len(STAT_KEYS))
    for k in range(F):
        fp.store(k)
        a_pair, f_pair = alone[k].members[0].pair, fp.members[k].pair
        assert a_pair.step == f_pair.step == 12
        for role in ("G", "D", "G_ema"):
            a, b = getattr(a_pair, role).state_dict(), getattr(f_pair, role).state_dict()
            assert _max_rel(a, b) <= 1e-5, (k, role)
        for opt in ("opt_g", "opt_d"):
            a, b = getattr(a_pair, opt).state_dict(), getattr(f_pair, opt).state_dict()
            assert a["state"].keys() == b["state"].keys()
            for i, s in a["state"].items():
                assert float(s["step"]) == float(b["state"][i]["step"]) == 12
                torch.testing.assert_close(s["exp_avg_sq"], b["state"][i]["exp_avg_sq"], **EXACT)


def test_a_class_rolled_back_alone_keeps_its_own_adam_count(exact_cpu):
    """Class 1 goes back 3 steps (as a rollback does) while class 0 goes on: each then steps
    exactly as it would alone, with its own Adam step count and moving-average warm-up."""
    cfg = _cfg(batch_size=16)
    alone, fp = _alone(cfg, (0, 1)), _fused(cfg, (0, 1))
    gen = torch.Generator().manual_seed(2)
    batches = [
        [(torch.rand(16, 1, 16, 16, generator=gen) * 2 - 1, torch.randn(16, 100, generator=gen))
         for _ in range(2)]
        for _ in range(8)
    ]  # fmt: skip

    def step_alone(k, s):
        alone[k].update([Batch(batches[s][k][0], None, batches[s][k][1], None)])

    def step_fused(s0, s1):
        real = torch.cat([batches[s0][0][0], batches[s1][1][0]], 1)
        z = torch.cat([batches[s0][0][1], batches[s1][1][1]], 1)
        fp.update([Batch(real, None, z, None)])

    for s in range(3):
        step_fused(s, s)
    fp.store(1)
    m = fp.members[1].pair
    saved = {r: {k: v.clone() for k, v in getattr(m, r).state_dict().items()}
             for r in ("G", "D", "G_ema")}  # fmt: skip
    saved_opt = {  # a copy of both optimizers' state, by parameter
        o: {p: {k: v.clone() for k, v in st.items()} for p, st in getattr(m, o).state.items()}
        for o in ("opt_g", "opt_d")
    }
    for s in range(3, 5):
        step_fused(s, s)
    # roll class 1 back to step 3: its pair as saved, loaded into its slices
    for r, sd in saved.items():
        getattr(m, r).load_state_dict(sd)
    for o, st in saved_opt.items():
        getattr(m, o).state.update(st)
    m.step = 3
    fp.load(1)
    for s in range(5, 8):
        step_fused(s, s - 2)  # class 0 at steps 5..7, class 1 again at 3..5
    for s in range(8):
        step_alone(0, s)
    for s in range(6):
        step_alone(1, s)
    for k, steps in ((0, 8), (1, 6)):
        fp.store(k)
        a_pair, f_pair = alone[k].members[0].pair, fp.members[k].pair
        assert f_pair.step == a_pair.step == steps
        for role in ("G", "D", "G_ema"):
            a, b = getattr(a_pair, role).state_dict(), getattr(f_pair, role).state_dict()
            assert _max_rel(a, b) <= 1e-5, (k, role)
        assert float(next(iter(f_pair.opt_g.state.values()))["step"]) == steps


def test_auto_fuse_fills_half_of_the_free_memory():
    cfg = dataclasses.replace(tiny(), resolution=32, batch_size=64)
    g_bytes, d_bytes = class_bytes(cfg, 1300, 3)
    assert 0 < d_bytes < g_bytes  # G's upsampled maps dominate
    need = g_bytes + d_bytes
    assert auto_fuse(1000, [(80 * need, need)]) == 40
    assert auto_fuse(10, [(80 * need, need)]) == 10  # at most the rank's classes
    assert auto_fuse(10, [(need, need)]) == 1  # at least one
    # G and D on two GPUs: the tighter of the two decides
    assert auto_fuse(1000, [(100 * g_bytes, g_bytes), (20 * d_bytes, d_bytes)]) == 10


# ---- through the training loop ---------------------------------------------------------------

EXACT_RUN = "--d-dropout 0 --no-channels-last --threads 1 --devices cpu".split()


@pytest.mark.parametrize(
    ("graphs", "devices", "schedule", "want"),
    [
        ("auto", ("cuda:0", "cuda:0"), "sync", True),
        ("auto", ("cuda:1", "cuda:1"), "sync", True),
        ("auto", ("cuda:0", "cuda:1"), "sync", False),  # a graph is one device's stream
        ("auto", ("cpu", "cpu"), "sync", False),
        ("auto", ("cuda:0", "cuda:0"), "async", False),
        ("off", ("cuda:0", "cuda:0"), "sync", False),
        ("on", ("cuda:0", "cuda:0"), "sync", True),
    ],
)
def test_cuda_graphs_auto_replays_a_fused_group_where_a_graph_can(graphs, devices, schedule, want):
    cfg = dataclasses.replace(tiny(), cuda_graphs=graphs, schedule=schedule)
    assert use_graphs(cfg, devices) is want


def _train(digits_file, run, *extra):
    """One in-process run of the tiny preset (batch 16) on classes 0-2, 6 steps."""
    args = tiny_args(digits_file, run, "--classes", "0", "1", "2", *EXACT_RUN, *extra)
    return main(args)


def _state(run, k):
    return read(run / f"class_{k:03d}" / "checkpoint.pt")


def _assert_same_class(run_a, run_b, k, rel=1e-5):
    a, b = _state(run_a, k), _state(run_b, k)
    assert a["step"] == b["step"] and a["retries"] == b["retries"]
    for role in ("G", "D", "G_ema"):
        assert _max_rel(a[role], b[role]) <= rel, (k, role)
    for opt in ("opt_g", "opt_d"):
        for i, s in a[opt]["state"].items():
            t = b[opt]["state"][i]
            assert float(s["step"]) == float(t["step"])
            torch.testing.assert_close(s["exp_avg"], t["exp_avg"], rtol=rel, atol=0)
    torch.testing.assert_close(a["rng"]["noise"], b["rng"]["noise"], **EXACT)


def _events(capsys, name):
    lines = capsys.readouterr().out.splitlines()
    return [
        e for e in map(json.loads, (x for x in lines if x.startswith("{"))) if e["event"] == name
    ]


@pytest.mark.parametrize("fuse", ["2", "3"])
def test_a_run_trained_fused_has_the_weights_of_one_trained_alone(
    fuse, tmp_path, digits_file, exact_cpu, capsys
):
    assert _train(digits_file, tmp_path / "alone", "--fuse", "1") == 0
    capsys.readouterr()
    assert _train(digits_file, tmp_path / "fused", "--fuse", fuse) == 0
    events = _events(capsys, "fused")
    groups = [e["classes"] for e in events]
    assert groups == ([[0, 1, 2]] if fuse == "3" else [[0, 1]])  # fuse 2: 2 + 1 alone
    assert [e["cuda_graph"] for e in events] == [False]  # --cuda-graphs auto on a CPU: eager
    for k in (0, 1, 2):
        _assert_same_class(tmp_path / "alone", tmp_path / "fused", k)
        lines = [
            [
                json.loads(x)
                for x in (run / f"class_{k:03d}" / "metrics.jsonl").read_text().splitlines()
            ]
            for run in (tmp_path / "alone", tmp_path / "fused")
        ]
        assert [m["step"] for m in lines[0]] == [m["step"] for m in lines[1]] == [2, 3, 4, 6]
        for a, b in zip(*lines):
            assert b["s_per_step"] > 0
            for key in ("loss_d", "loss_g", "d_real", "d_fake", "logit_gap", "d_acc"):
                assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-7), key
        for name in ("samples_step0000006.png", "result.json"):
            assert (tmp_path / "fused" / f"class_{k:03d}" / name).is_file()
    summary = json.loads((tmp_path / "fused" / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["done"] * 3
    assert all(c["train_s"] > 0 and c["imgs_per_s"] > 0 for c in summary["classes"])


def test_a_nan_in_one_fused_class_rolls_back_that_class_alone(
    tmp_path, digits_file, exact_cpu, capsys
):
    """With nan:1:4, class 1 goes back to its step-3 checkpoint with a new noise seed while
    classes 0 and 2 go on; every class ends as it does in an unfused run with the same fault."""
    fault = ("--inject-fault", "nan:1:4")
    assert _train(digits_file, tmp_path / "alone", "--fuse", "1", *fault) == 0
    capsys.readouterr()
    assert _train(digits_file, tmp_path / "fused", "--fuse", "3", *fault) == 0
    out = capsys.readouterr().out
    rollbacks = [json.loads(x) for x in out.splitlines() if '"rollback"' in x]
    assert [(e["class_id"], e["back_to"]) for e in rollbacks] == [(1, 3)]
    for k in (0, 1, 2):
        _assert_same_class(tmp_path / "alone", tmp_path / "fused", k)
        # The curves too: class 1 ends in a group of one (the others done), whose step must
        # still give its own six statistics.
        alone, fused = (_curves(tmp_path / run, k) for run in ("alone", "fused"))
        assert [m["step"] for m in alone] == [m["step"] for m in fused]
        for a, f in zip(alone, fused):
            for key in STAT_KEYS:
                assert f[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (k, a["step"], key)
    assert _state(tmp_path / "fused", 1)["retries"] == 1
    assert _state(tmp_path / "fused", 0)["retries"] == 0


def _curves(run, k):
    lines = (run / f"class_{k:03d}" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines]


def test_a_fused_class_that_keeps_diverging_leaves_and_the_others_finish(
    tmp_path, digits_file, exact_cpu, capsys
):
    code = _train(
        digits_file,
        tmp_path / "fused",
        "--fuse",
        "3",
        "--inject-fault",
        "nan-always:1:0",
        "--max-retries",
        "1",
    )
    assert code == 3  # some classes diverged
    fused = [e["classes"] for e in _events(capsys, "fused")]
    assert fused == [
        [0, 1, 2],
        [0, 2],
    ]  # class 1 is given up at its second NaN (its step 2, the others at 4); the rest re-fused
    summary = json.loads((tmp_path / "fused" / "summary.json").read_text())
    assert [c["status"] for c in summary["classes"]] == ["done", "diverged", "done"]
    assert _train(digits_file, tmp_path / "alone", "--fuse", "1", "--classes", "0", "2") == 0
    for k in (0, 2):  # the classes that went on are untouched by class 1's fall
        _assert_same_class(tmp_path / "alone", tmp_path / "fused", k)


# ---- under --schedule async --------------------------------------------------------------------

# Batches of 32 and D's of 16: multiples of 16, so that fused and alone round alike (module doc).
ASYNC = ("--schedule", "async", "--batch-size", "32", "--batch-size-d", "16")


def _assert_same_cache(run_a, run_b, k):
    """The cached fakes of the step before (async) in class k's checkpoints."""
    a, b = _state(run_a, k)["async_cache"], _state(run_b, k)["async_cache"]
    assert [x.shape for x in a] == [y.shape for y in b] == [(32, 1, 16, 16)]
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("extra", [(), ("--augment", "color,translation,cutout")])
def test_an_async_fused_run_has_the_weights_and_cached_fakes_of_one_trained_alone(
    extra, tmp_path, digits_file, exact_cpu, capsys
):
    assert _train(digits_file, tmp_path / "alone", "--fuse", "1", *ASYNC, *extra) == 0
    capsys.readouterr()
    assert _train(digits_file, tmp_path / "fused", "--fuse", "3", *ASYNC, *extra) == 0
    assert [e["classes"] for e in _events(capsys, "fused")] == [[0, 1, 2]]
    for k in (0, 1, 2):
        _assert_same_class(tmp_path / "alone", tmp_path / "fused", k)
        _assert_same_cache(tmp_path / "alone", tmp_path / "fused", k)
        alone, fused = (_curves(tmp_path / run, k) for run in ("alone", "fused"))
        for a, f in zip(alone, fused, strict=True):
            for key in STAT_KEYS:
                assert f[key] == pytest.approx(a[key], rel=1e-5, abs=1e-6), (k, a["step"], key)


@pytest.mark.parametrize("fault, back_to", [("nan:1:4", 3), ("nan:1:2", 0)])
def test_a_nan_in_one_async_fused_class_rolls_back_that_class_alone(
    fault, back_to, tmp_path, digits_file, exact_cpu, capsys
):
    """Class 1 goes back to its step-3 checkpoint and its cached fakes, or with no checkpoint
    yet to a fresh pair that makes its first fakes again while classes 0 and 2 keep theirs;
    every class ends as in an unfused run with the same fault."""
    args = ("--inject-fault", fault, *ASYNC)
    assert _train(digits_file, tmp_path / "alone", "--fuse", "1", *args) == 0
    capsys.readouterr()
    assert _train(digits_file, tmp_path / "fused", "--fuse", "3", *args) == 0
    rollbacks = _events(capsys, "rollback")
    assert [(e["class_id"], e["back_to"]) for e in rollbacks] == [(1, back_to)]
    for k in (0, 1, 2):
        _assert_same_class(tmp_path / "alone", tmp_path / "fused", k)
        _assert_same_cache(tmp_path / "alone", tmp_path / "fused", k)
    assert _state(tmp_path / "fused", 1)["retries"] == 1


def test_an_async_fused_run_resumed_in_other_groups_ends_as_a_straight_one(
    tmp_path, digits_file, exact_cpu
):
    """Stopped at step 4 fused 3, resumed fused 2 (classes 0 and 1 together, class 2 alone):
    each class's cached fakes and D copy go from one grouping to the other."""
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    common = ("--fuse", "3", "--checkpoint-every", "4", *ASYNC)
    assert _train(digits_file, straight, *common, "--steps", "8") == 0
    assert _train(digits_file, halves, *common, "--steps", "4") == 0
    assert _state(halves, 0)["step"] == 4
    resume = ["train", "--run", str(halves), "--resume", "--steps", "8", "--fuse", "2"]
    assert main([*resume, "--no-progress"]) == 0
    for k in (0, 1, 2):
        _assert_same_class(straight, halves, k)
        _assert_same_cache(straight, halves, k)
